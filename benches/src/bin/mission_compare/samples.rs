//! Paired samples of `mission_compare`: what one run cost (its wall time and the CPU
//! its gridds spent), whether a pair is valid, the paired ratios mission / online, and
//! their spread (nearest-rank percentiles, as `grid_benches::report::percentile`).

use std::time::Duration;

use grid_benches::limits::MISSION_COMPARE_RUN_MS_MAX;

/// The gridds whose CPU is read around every run, in this order (both for both ways:
/// the same set, so background work of either host weighs on both sides alike).
pub const GRIDDS: [&str; 2] = ["edge", "site"];

/// What one run cost, and how it ended.
#[derive(Clone, Debug)]
pub struct Measured {
    pub wall: Duration,
    /// Nanoseconds on a CPU per gridd of [`GRIDDS`] from right before the control call
    /// to right after its answer (negative when a thread exited in between).
    pub cpu_ns: [i128; 2],
    /// The same over the pause right after the answer (work the run left behind, and
    /// the hosts' background work): reported, never part of the run's CPU.
    pub cpu_after_ns: [i128; 2],
    /// `Ok` when the run succeeded (for its own request id, its receipt verified),
    /// else why not.
    pub outcome: Result<(), String>,
}

impl Measured {
    /// The CPU of every gridd together.
    pub fn cpu_total_ns(&self) -> i128 {
        self.cpu_ns.iter().sum()
    }

    /// Why this run makes its sample invalid, if it does.
    pub fn invalid(&self) -> Option<String> {
        if let Err(reason) = &self.outcome {
            return Some(format!("not succeeded: {reason}"));
        }
        let bound = Duration::from_millis(MISSION_COMPARE_RUN_MS_MAX);
        if self.wall > bound {
            return Some(format!(
                "took longer than MISSION_COMPARE_RUN_MS_MAX ({MISSION_COMPARE_RUN_MS_MAX} ms)"
            ));
        }
        if let Some(i) = self.cpu_ns.iter().position(|&ns| ns < 0) {
            return Some(format!(
                "negative CPU delta at gridd {} (a thread exited during the run)",
                GRIDDS[i]
            ));
        }
        if self.cpu_total_ns() <= 0 {
            return Some("zero CPU delta over the gridds".to_owned());
        }
        None
    }
}

/// Which way runs first in a sample: alternating from one attempt to the next
/// (online–mission, mission–online, …), so drift weighs on both alike.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Order {
    OnlineFirst,
    MissionFirst,
}

impl Order {
    pub fn of_attempt(attempt: usize) -> Order {
        if attempt.is_multiple_of(2) {
            Order::OnlineFirst
        } else {
            Order::MissionFirst
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Order::OnlineFirst => "online, mission",
            Order::MissionFirst => "mission, online",
        }
    }
}

/// One valid pair: the same Process once under the online grant, once on the mission.
#[derive(Clone, Debug)]
pub struct Sample {
    pub attempt: usize,
    pub order: Order,
    pub online: Measured,
    pub mission: Measured,
}

impl Sample {
    /// The pair as a sample, or why it is invalid (the first run's reason first).
    pub fn judge(
        attempt: usize,
        order: Order,
        online: Measured,
        mission: Measured,
    ) -> Result<Sample, String> {
        let reasons = [("online grant", &online), ("mission allocation", &mission)];
        let reasons = match order {
            Order::OnlineFirst => reasons,
            Order::MissionFirst => [reasons[1], reasons[0]],
        };
        for (name, run) in reasons {
            if let Some(why) = run.invalid() {
                return Err(format!("{name} run {why}"));
            }
        }
        Ok(Sample {
            attempt,
            order,
            online,
            mission,
        })
    }

    /// Wall time, mission / online.
    pub fn time_ratio(&self) -> f64 {
        self.mission.wall.as_secs_f64() / self.online.wall.as_secs_f64()
    }

    /// CPU of the gridds, mission / online (both positive in a valid sample).
    pub fn cpu_ratio(&self) -> f64 {
        self.mission.cpu_total_ns() as f64 / self.online.cpu_total_ns() as f64
    }
}

/// The median of some numbers and how they spread.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    pub median: f64,
    pub p10: f64,
    pub p25: f64,
    pub p75: f64,
    pub p90: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    /// Nearest-rank percentiles of `values` (none when there are none).
    pub fn of(mut values: Vec<f64>) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        values.sort_by(f64::total_cmp);
        let p = |p: f64| {
            let rank = ((p * values.len() as f64).ceil() as usize).max(1);
            values[rank.min(values.len()) - 1]
        };
        Some(Spread {
            median: p(0.50),
            p10: p(0.10),
            p25: p(0.25),
            p75: p(0.75),
            p90: p(0.90),
            min: values[0],
            max: values[values.len() - 1],
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(wall_ms: u64, cpu_ns: [i128; 2]) -> Measured {
        Measured {
            wall: Duration::from_millis(wall_ms),
            cpu_ns,
            cpu_after_ns: [0, 0],
            outcome: Ok(()),
        }
    }

    #[test]
    fn a_pair_is_valid_only_when_both_runs_succeeded_in_bounds_with_cpu() {
        let ok = Sample::judge(0, Order::OnlineFirst, run(4, [100, 50]), run(2, [60, 0]))
            .expect("valid");
        assert_eq!(ok.time_ratio(), 0.5);
        assert_eq!(ok.cpu_ratio(), 0.4);

        let mut failed = run(2, [60, 0]);
        failed.outcome = Err("unknown".to_owned());
        let why = Sample::judge(1, Order::MissionFirst, run(4, [1, 1]), failed).unwrap_err();
        assert_eq!(why, "mission allocation run not succeeded: unknown");

        let slow = run(MISSION_COMPARE_RUN_MS_MAX + 1, [1, 1]);
        let why = Sample::judge(2, Order::OnlineFirst, slow, run(2, [1, 0])).unwrap_err();
        assert!(why.starts_with("online grant run took longer than MISSION_COMPARE_RUN_MS_MAX"));

        let why = Sample::judge(3, Order::OnlineFirst, run(4, [0, 0]), run(2, [1, 0])).unwrap_err();
        assert_eq!(why, "online grant run zero CPU delta over the gridds");

        let why =
            Sample::judge(4, Order::OnlineFirst, run(4, [10, -1]), run(2, [1, 0])).unwrap_err();
        assert!(why.contains("negative CPU delta at gridd site"), "{why}");
    }

    #[test]
    fn the_order_alternates_per_attempt() {
        assert_eq!(Order::of_attempt(0), Order::OnlineFirst);
        assert_eq!(Order::of_attempt(1), Order::MissionFirst);
        assert_eq!(Order::of_attempt(2), Order::OnlineFirst);
    }

    #[test]
    fn spreads_are_nearest_rank() {
        let spread = Spread::of((1..=40).rev().map(f64::from).collect()).expect("some");
        assert_eq!(spread.median, 20.0);
        assert_eq!(spread.p10, 4.0);
        assert_eq!(spread.p25, 10.0);
        assert_eq!(spread.p75, 30.0);
        assert_eq!(spread.p90, 36.0);
        assert_eq!((spread.min, spread.max), (1.0, 40.0));
        assert_eq!(Spread::of(Vec::new()), None);
    }
}
