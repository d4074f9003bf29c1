//! What the benchmarks print: durations, percentiles, ratios, markdown tables, the
//! failures of a run, and the header that says what ran on which machine.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use crate::measure::Failures;
use crate::procs::{Result, machine, report_gridd};

/// Nearest-rank percentile of sorted nanoseconds (zero when there are none).
pub fn percentile(sorted: &[u64], p: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let rank = ((p * sorted.len() as f64).ceil() as usize).max(1);
    Duration::from_nanos(sorted[rank.min(sorted.len()) - 1])
}

/// Milliseconds, two decimals below 10 ms, one above.
pub fn ms(d: Duration) -> String {
    let ms = d.as_secs_f64() * 1e3;
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else {
        format!("{ms:.1} ms")
    }
}

/// Nanoseconds in the unit that suits them (ns, µs, ms).
pub fn human_ns(ns: f64) -> String {
    if ns < 1e3 {
        format!("{ns:.1} ns")
    } else if ns < 1e6 {
        format!("{:.2} µs", ns / 1e3)
    } else {
        format!("{:.3} ms", ns / 1e6)
    }
}

/// `a / b` as `1.23×`, or `–` when either is missing or `b` is not positive.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> String {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => format!("{:.2}×", a / b),
        _ => "–".to_owned(),
    }
}

/// CPU time per operation in µs, or `–` when there was none.
pub fn per_operation(cpu: Duration, operations: u64) -> String {
    if operations == 0 {
        return "–".to_owned();
    }
    format!("{:.0} µs", cpu.as_secs_f64() * 1e6 / operations as f64)
}

/// A markdown table, printed with a blank line before it.
pub struct Table {
    lines: Vec<String>,
    columns: usize,
}

impl Table {
    /// `align` holds one letter per column: `l` left, `r` right.
    pub fn new(header: &[&str], align: &str) -> Table {
        assert_eq!(header.len(), align.len(), "one alignment per column");
        let rule: String = align
            .chars()
            .map(|a| if a == 'r' { "---:|" } else { "---|" })
            .collect();
        Table {
            lines: vec![format!("| {} |", header.join(" | ")), format!("|{rule}")],
            columns: header.len(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(cells.len(), self.columns, "one cell per column");
        self.lines.push(format!("| {} |", cells.join(" | ")));
    }

    pub fn print(&self) {
        println!();
        for line in &self.lines {
            println!("{line}");
        }
    }
}

/// Prints `title:` and, per group that has any, its line and its counted reasons, or
/// `title: none` (with `none_note`, e.g. ` (every acquire succeeded)`) when none has.
pub fn print_failures<'a>(
    title: &str,
    none_note: &str,
    groups: impl IntoIterator<Item = (String, &'a Failures)>,
) {
    let mut any = false;
    for (line, failures) in groups {
        if failures.is_empty() {
            continue;
        }
        if !any {
            println!();
            println!("{title}:");
            any = true;
        }
        println!("- {line}");
        for (reason, n) in &failures.reasons {
            println!("    - {n} × {reason}");
        }
    }
    if !any {
        println!();
        println!("{title}: none{none_note}.");
    }
}

/// The first lines of a run: what it compares, the machine, and which `gridd` runs
/// (when Grid's side does).
pub fn print_header(title: &str, bin_dir: Option<&Path>) -> Result<()> {
    println!("{title}");
    println!("machine: {}", machine());
    if let Some(dir) = bin_dir {
        report_gridd(dir)?;
    }
    Ok(())
}

/// Where criterion writes its estimates: the same rule criterion follows, made
/// explicit so the summary reads the files this run wrote.
pub fn criterion_directory() -> PathBuf {
    if let Some(home) = std::env::var_os("CRITERION_HOME") {
        return PathBuf::from(home);
    }
    if let Some(target) = std::env::var_os("CARGO_TARGET_DIR") {
        return PathBuf::from(target).join("criterion");
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("target")
        .join("criterion")
}

/// Criterion's estimate (ns per iteration) in `estimates.json`, the figure its report
/// prints as `time`: the slope of the linear regression when criterion computed one
/// (linear sampling), the mean otherwise. Read without a JSON library: each estimate
/// is `"slope":{"confidence_interval":{...},"point_estimate":X,...}`. Only a file this
/// run wrote (modified after `started`) counts.
pub fn criterion_estimate_ns(
    directory: &Path,
    group: &str,
    engine: &str,
    started: SystemTime,
) -> Option<f64> {
    let path = directory
        .join(group)
        .join(engine)
        .join("new")
        .join("estimates.json");
    if std::fs::metadata(&path).ok()?.modified().ok()? < started {
        return None;
    }
    let text = std::fs::read_to_string(path).ok()?;
    let point_estimate = |key: &str| -> Option<f64> {
        let section = &text[text.find(&format!("\"{key}\":{{"))?..];
        let field = "\"point_estimate\":";
        let value = &section[section.find(field)? + field.len()..];
        let end = value.find([',', '}'])?;
        value[..end].trim().parse().ok()
    };
    point_estimate("slope").or_else(|| point_estimate("mean"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_are_nearest_rank() {
        let sorted: Vec<u64> = (1..=100).collect();
        assert_eq!(percentile(&sorted, 0.50), Duration::from_nanos(50));
        assert_eq!(percentile(&sorted, 0.99), Duration::from_nanos(99));
        assert_eq!(percentile(&sorted, 1.0), Duration::from_nanos(100));
        assert_eq!(percentile(&[], 0.5), Duration::ZERO);
    }

    #[test]
    fn ratios_and_durations_print_as_before() {
        assert_eq!(ratio(Some(3.0), Some(2.0)), "1.50×");
        assert_eq!(ratio(Some(3.0), Some(0.0)), "–");
        assert_eq!(ratio(None, Some(1.0)), "–");
        assert_eq!(ms(Duration::from_micros(1_234)), "1.23 ms");
        assert_eq!(ms(Duration::from_micros(12_345)), "12.3 ms");
        assert_eq!(per_operation(Duration::from_millis(3), 1_000), "3 µs");
        assert_eq!(per_operation(Duration::from_millis(3), 0), "–");
    }
}
