//! The arguments every side-by-side binary takes (`--seconds`, `--warmup`, `--only`,
//! `--keep`), parsed with clap, and the parsers of their comma-separated lists of
//! caller counts. Each binary flattens [`Measurement`] into its own arguments and names
//! its defaults and its other side in [`Defaults`].

use clap::Parser;

use crate::limits::{CALLERS_MAX, MEASUREMENT_SECONDS_MAX, WARMUP_SECONDS_MAX};

/// How long each measurement runs, which side runs, and whether the work stays.
#[derive(clap::Args, Debug, Clone)]
pub struct Measurement {
    /// Seconds recorded per measurement, after the warm-up (more than 0, at most 600).
    #[arg(long, value_name = "S", value_parser = window_seconds)]
    pub seconds: f64,
    /// Seconds of warm-up before each measurement, not recorded (0 to 60).
    #[arg(long, value_name = "S", value_parser = warmup_seconds)]
    pub warmup: f64,
    /// Measure one side only (the other is not started).
    #[arg(long, value_name = "SIDE")]
    pub only: Option<String>,
    /// Keep the work directory (stores, certificates, logs) instead of removing it.
    #[arg(long)]
    pub keep: bool,
}

impl Measurement {
    /// Whether Grid's side runs.
    pub fn runs_grid(&self) -> bool {
        self.only.as_deref().is_none_or(|only| only == "grid")
    }

    /// Whether the alternative's side runs.
    pub fn runs_other(&self) -> bool {
        self.only.as_deref() != Some("grid")
    }
}

/// What differs between the binaries' [`Measurement`]s.
pub struct Defaults {
    pub seconds: &'static str,
    pub warmup: &'static str,
    /// The name of the alternative for `--only` (`etcd`, `jetstream`, `floor`).
    pub other: &'static str,
}

/// The binary's arguments from the command line, with its defaults (exits with clap's
/// message on a bad one).
pub fn parse<A: Parser>(defaults: &Defaults) -> A {
    let command = A::command()
        .mut_arg("seconds", |arg| {
            arg.default_value(defaults.seconds).required(false)
        })
        .mut_arg("warmup", |arg| {
            arg.default_value(defaults.warmup).required(false)
        })
        .mut_arg("only", |arg| arg.value_parser(["grid", defaults.other]));
    let matches = command.get_matches();
    A::from_arg_matches(&matches).unwrap_or_else(|error| error.exit())
}

/// As [`parse`], for a binary beside more than one alternative: `--only` takes `grid`
/// or one of `others` ([`Defaults::other`] is not used).
pub fn parse_among<A: Parser>(defaults: &Defaults, others: &[&'static str]) -> A {
    let mut sides = vec!["grid"];
    sides.extend_from_slice(others);
    let command = A::command()
        .mut_arg("seconds", |arg| {
            arg.default_value(defaults.seconds).required(false)
        })
        .mut_arg("warmup", |arg| {
            arg.default_value(defaults.warmup).required(false)
        })
        .mut_arg("only", |arg| arg.value_parser(sides));
    let matches = command.get_matches();
    A::from_arg_matches(&matches).unwrap_or_else(|error| error.exit())
}

/// A window's seconds: more than 0 and at most `MEASUREMENT_SECONDS_MAX`.
pub fn window_seconds(text: &str) -> Result<f64, String> {
    let seconds: f64 = text.parse().map_err(|e| format!("{e}"))?;
    if seconds > 0.0 && seconds <= MEASUREMENT_SECONDS_MAX {
        Ok(seconds)
    } else {
        Err(format!("more than 0 and at most {MEASUREMENT_SECONDS_MAX}"))
    }
}

/// A warm-up's seconds: 0 to `WARMUP_SECONDS_MAX`.
pub fn warmup_seconds(text: &str) -> Result<f64, String> {
    let seconds: f64 = text.parse().map_err(|e| format!("{e}"))?;
    if (0.0..=WARMUP_SECONDS_MAX).contains(&seconds) {
        Ok(seconds)
    } else {
        Err(format!("0 to {WARMUP_SECONDS_MAX}"))
    }
}

/// Numbers of concurrent callers, one measurement each, in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counts(pub Vec<usize>);

/// `1,16,64`: each between 1 and `CALLERS_MAX` (a Grid host serves at most
/// `CONTROL_CONNECTIONS_MAX` control connections, one per caller).
pub fn counts(text: &str) -> Result<Counts, String> {
    let counts = text
        .split(',')
        .map(|c| c.trim().parse::<usize>().map_err(|e| format!("{c}: {e}")))
        .collect::<Result<Vec<_>, _>>()?;
    if counts.iter().any(|&c| c == 0 || c > CALLERS_MAX) {
        return Err(format!("each between 1 and {CALLERS_MAX}"));
    }
    Ok(Counts(counts))
}

/// As [`counts`], or `0` for none (the row is skipped).
pub fn counts_or_none(text: &str) -> Result<Counts, String> {
    if text.trim() == "0" {
        return Ok(Counts(Vec::new()));
    }
    counts(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_bounded_by_the_control_connections() {
        assert_eq!(counts("1, 16,64"), Ok(Counts(vec![1, 16, 64])));
        assert!(counts("0").is_err());
        assert!(counts(&format!("{}", CALLERS_MAX + 1)).is_err());
        assert_eq!(counts_or_none("0"), Ok(Counts(Vec::new())));
        assert!(counts_or_none("1,0").is_err());
    }

    #[test]
    fn windows_are_bounded() {
        assert!(window_seconds("0").is_err());
        assert!(window_seconds("600").is_ok());
        assert!(window_seconds("601").is_err());
        assert!(warmup_seconds("0").is_ok());
        assert!(warmup_seconds("61").is_err());
    }
}
