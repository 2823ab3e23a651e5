//! The benchmark protocols people compare numbers by, each as its own tool defines it:
//! [`llama_benchy`] (pp/tg/depth/concurrency grid, its metric definitions and JSON file),
//! [`arena_v2`] (Spark Arena's profile v2: a fixed llama-benchy grid run cell by cell in a
//! seeded heat-aware order) and [`lil`] (llm-inference-bench: sustained decode cells at long
//! contexts). The present concurrency sweep stays the default protocol (`bench::sweep`).
//!
//! Pure: the grids, orders, prompts ([`corpus`], from the model's own tokenizer) and metric
//! math. Effects: [`run`] (the requests of each cell, through `bench::client`).

pub mod arena_v2;
pub mod corpus;
pub mod lil;
pub mod llama_benchy;
pub mod run;

/// Which protocol a `bench` run follows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Protocol {
    /// spark-launch's own sweep (concurrency 1/4/16/32, words as tokens).
    Sweep,
    LlamaBenchy,
    ArenaV2,
    Lil,
}

impl Protocol {
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Sweep => "sweep",
            Protocol::LlamaBenchy => "llama-benchy",
            Protocol::ArenaV2 => "arena-v2",
            Protocol::Lil => "lil",
        }
    }
}

/// A small seeded generator (splitmix64): the same seed gives the same prompts and the same
/// cell order on every machine and every version, so a recorded seed reproduces a run.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`0` when `n` is 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next_u64() % n }
    }

    /// Shuffles in place (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_numbers_and_another_seed_others() {
        let a: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::new(42);
                move |_| r.next_u64()
            })
            .collect();
        let b: Vec<u64> = (0..4)
            .map({
                let mut r = Rng::new(42);
                move |_| r.next_u64()
            })
            .collect();
        let c = Rng::new(43).next_u64();
        assert_eq!(a, b);
        assert_ne!(a[0], c);
        let mut v: Vec<u32> = (0..10).collect();
        Rng::new(7).shuffle(&mut v);
        let mut sorted = v.clone();
        sorted.sort();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
        assert_ne!(v, sorted);
    }
}
