//! Simulated tag sources (profile `sources`, docs/sources.md): the observations of a
//! `simulate` tag as a pure function of its definition and the observation's index.
//!
//! Observation `n` (1, 2, …) of a tag sampled every `interval_ms` is the wave at time
//! `n × interval_ms`, shifted by a phase the seed chooses, plus a small seeded wobble
//! (at most 2% of the range), kept inside `[min, max]`. No clock and no state: the
//! host journals what this returns and never asks for an index twice (the journal,
//! not this function, is what recovery reads).

use grid_spec::Wave;

/// One simulated tag's parameters (from `grid_spec::TagSource::Simulate`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Simulation {
    pub wave: Wave,
    pub period_s: u32,
    pub min: f64,
    pub max: f64,
    pub seed: u64,
    pub interval_ms: u32,
}

impl Simulation {
    /// The parameters of a `simulate` source; `None` for any other source.
    pub fn of(source: &grid_spec::TagSource) -> Option<Simulation> {
        match *source {
            grid_spec::TagSource::Simulate {
                wave,
                period_s,
                min,
                max,
                seed,
                interval_ms,
            } => Some(Simulation {
                wave,
                period_s,
                min,
                max,
                seed,
                interval_ms,
            }),
            _ => None,
        }
    }

    /// Observation `n`: finite, within `[min, max]`, the same for the same
    /// parameters and `n` on every machine.
    pub fn observation(&self, n: u64) -> f64 {
        assert!(
            self.min < self.max && self.min.is_finite() && self.max.is_finite(),
            "validated: finite min < max"
        );
        assert!(self.period_s >= 1, "validated: period-s >= 1");
        let period_ms = u128::from(self.period_s) * 1_000;
        // Exact integer phase within the period, then the seed's offset.
        let at = (u128::from(n) * u128::from(self.interval_ms)) % period_ms;
        let offset = unit(splitmix(self.seed));
        let phase = (at as f64 / period_ms as f64 + offset).fract();
        let shape = match self.wave {
            Wave::Sine => 0.5 + 0.5 * (std::f64::consts::TAU * phase).sin(),
            Wave::Triangle => {
                if phase < 0.5 {
                    2.0 * phase
                } else {
                    2.0 - 2.0 * phase
                }
            }
            Wave::Square => {
                if phase < 0.5 {
                    1.0
                } else {
                    0.0
                }
            }
            Wave::Sawtooth => phase,
        };
        let wobble = (unit(splitmix(self.seed ^ splitmix(n))) - 0.5) * 0.04;
        let x = (shape + wobble).clamp(0.0, 1.0);
        let value = self.min + (self.max - self.min) * x;
        // Rounding at the ends cannot leave the range; finite by construction.
        value.clamp(self.min, self.max)
    }
}

/// SplitMix64: a fixed, portable mix of one 64-bit word.
fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A word as a number in `[0, 1)`.
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sim(wave: Wave, seed: u64) -> Simulation {
        Simulation {
            wave,
            period_s: 20,
            min: 60.0,
            max: 95.0,
            seed,
            interval_ms: 1_000,
        }
    }

    #[test]
    fn observations_are_deterministic_finite_and_in_range() {
        for wave in Wave::ALL {
            let s = sim(wave, 7);
            for n in 1..500 {
                let v = s.observation(n);
                assert!(
                    v.is_finite() && (60.0..=95.0).contains(&v),
                    "{wave:?} {n} {v}"
                );
                assert_eq!(v.to_bits(), s.observation(n).to_bits());
            }
        }
        assert!(
            sim(Wave::Sine, 7).observation(u64::MAX).is_finite(),
            "the largest index still yields a finite value"
        );
    }

    #[test]
    fn the_seed_and_the_index_change_the_values() {
        let a: Vec<u64> = (1..40)
            .map(|n| sim(Wave::Sine, 7).observation(n).to_bits())
            .collect();
        let b: Vec<u64> = (1..40)
            .map(|n| sim(Wave::Sine, 8).observation(n).to_bits())
            .collect();
        assert_ne!(a, b);
        let distinct: std::collections::BTreeSet<u64> = a.iter().copied().collect();
        assert!(distinct.len() > 30, "a wave moves: {}", distinct.len());
    }

    #[test]
    fn a_wave_repeats_its_shape_each_period() {
        // Without the wobble the shape repeats: compare within the wobble's width.
        let s = sim(Wave::Triangle, 3);
        for n in 1..20 {
            let (a, b) = (s.observation(n), s.observation(n + 20));
            assert!((a - b).abs() <= 0.04 * 35.0 + 1e-9, "{n}: {a} vs {b}");
        }
    }

    #[test]
    fn only_simulate_sources_simulate() {
        let opcua = grid_spec::TagSource::OpcUa {
            endpoint: "opc.tcp://x".to_owned(),
            node: "n".to_owned(),
            security: grid_spec::OpcUaSecurity::None,
            policy: None,
            publishing_ms: 1000,
            server_certificate: None,
        };
        assert_eq!(Simulation::of(&opcua), None);
    }
}
