//! A small seeded generator (SplitMix64), so that a run's fault schedule is reproduced from its
//! printed seed on any machine, without depending on a generator crate's stream staying stable.

/// Deterministic pseudo-random numbers from a seed.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    /// A generator whose stream depends only on `seed`.
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `low..=high` (`low` when the range is empty).
    pub fn between(&mut self, low: u64, high: u64) -> u64 {
        if high <= low {
            return low;
        }
        low + self.next_u64() % (high - low + 1)
    }

    /// `count` distinct numbers below `bound` (fewer if `bound` is smaller), in random order.
    pub fn distinct(&mut self, count: usize, bound: usize) -> Vec<usize> {
        let mut pool: Vec<usize> = (0..bound).collect();
        let mut picked = Vec::with_capacity(count.min(bound));
        while picked.len() < count && !pool.is_empty() {
            let at = (self.next_u64() % pool.len() as u64) as usize;
            picked.push(pool.swap_remove(at));
        }
        picked
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_gives_the_same_stream() {
        let (mut a, mut b) = (Rng::new(7), Rng::new(7));
        assert_eq!(
            (0..5).map(|_| a.next_u64()).collect::<Vec<_>>(),
            (0..5).map(|_| b.next_u64()).collect::<Vec<_>>()
        );
    }

    #[test]
    fn distinct_picks_are_distinct_and_in_range() {
        let mut rng = Rng::new(1);
        let mut picks = rng.distinct(3, 5);
        picks.sort_unstable();
        picks.dedup();
        assert_eq!(picks.len(), 3);
        assert!(picks.iter().all(|&p| p < 5));
        assert_eq!(rng.distinct(4, 2).len(), 2);
        let x = rng.between(3, 9);
        assert!((3..=9).contains(&x));
    }
}
