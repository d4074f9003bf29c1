//! The seeded generator of every step that draws seeded cycles (`claim-stream`,
//! `publish-cycles`, `process-cycles`): splitmix64, the same sequence on every machine,
//! so a seed in a journey file reproduces its run's choices (which host is killed,
//! when, which kind of cycle).
//!
//! Changing it changes what every seeded journey does: the test below pins the first
//! values of seed 1.

/// A splitmix64 sequence.
#[derive(Debug, Clone)]
pub struct Seeded {
    state: u64,
}

impl Seeded {
    pub fn new(seed: u64) -> Seeded {
        Seeded { state: seed }
    }

    /// The next value.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// The next value modulo `n` (0 ≤ value < n; `n` > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// Whether the next value is a multiple of `n`: about one time in `n`.
    pub fn one_in(&mut self, n: u64) -> bool {
        self.next_u64().is_multiple_of(n)
    }
}

#[cfg(test)]
mod tests {
    use super::Seeded;

    #[test]
    fn seed_one_draws_the_same_values_everywhere() {
        let mut seeded = Seeded::new(1);
        assert_eq!(
            [seeded.next_u64(), seeded.next_u64(), seeded.next_u64()],
            [
                10_451_216_379_200_822_465,
                13_757_245_211_066_428_519,
                17_911_839_290_282_890_590
            ]
        );
    }
}
