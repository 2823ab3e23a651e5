//! The benchmark protocols people compare numbers by, each as its own tool defines it:
//! [`llama_benchy`] (pp/tg/depth/concurrency grid, its metric definitions and JSON file),
//! [`arena_v2`] (Spark Arena's profile v2: a fixed llama-benchy grid run cell by cell in a
//! seeded heat-aware order), [`lil`] (llm-inference-bench's sustained decode cells over
//! contexts to 128K, its metrics and its `benchmark_results.json`). The present concurrency sweep stays the default protocol
//! (`bench::sweep`).
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

/// How llama-benchy's `--save-result FILE` is written (its `--format`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ResultFormat {
    Json,
    Md,
}

/// A protocol run, resolved from the command line.
pub struct ProtocolRequest {
    pub target: crate::bench::Target,
    pub model: Option<String>,
    pub api_key: Option<crate::bench::client::BearerKey>,
    pub timeout: std::time::Duration,
    pub protocol: Protocol,
    /// The llama-benchy grid and options this protocol runs (arena-v2: its own).
    pub options: llama_benchy::BenchyOptions,
    /// The cells in the order they run.
    pub cells: Vec<llama_benchy::Cell>,
    /// Only the first cell gets a warm-up run (arena-v2 runs each cell as its own llama-benchy
    /// call, warmed once per session).
    pub warm_first_cell_only: bool,
    /// The seed of the prompts' places (and of arena-v2's order), recorded in the result.
    pub seed: u64,
    /// The model's tokenizer.json (or the folder holding it).
    pub tokenizer: std::path::PathBuf,
    /// The text prompts are cut from: a file, or a URL llama-benchy already cached.
    pub book: String,
    /// The tool's own file (`--save-result`) and its format.
    pub save_result: Option<(std::path::PathBuf, ResultFormat)>,
    /// spark-launch's own result file; `None`: a new file under the state folder.
    pub save_to: Option<std::path::PathBuf>,
    /// lil's grid; `Some` exactly when `protocol` is `Lil` (the llama-benchy grid is unused).
    pub lil: Option<lil::LilOptions>,
    /// `--skip-check`: measure without asking the questions first (recorded).
    pub skip_check: bool,
}

/// spark-launch's result file of a protocol run: what was asked, in which order, with which
/// seed, and the figures in the tool's own shape.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct ProtocolReport {
    pub version: u32,
    pub protocol: Protocol,
    pub started_at: String,
    pub url: String,
    pub job: Option<String>,
    pub model: String,
    pub seed: u64,
    pub options: llama_benchy::BenchyOptions,
    pub order: Vec<llama_benchy::Cell>,
    pub requests: u32,
    pub failed: u32,
    pub delta_user: i64,
    pub delta_context: i64,
    /// The figures, as llama-benchy's `--save-result --format json` holds them.
    pub llama_benchy: llama_benchy::BenchyReport,
    /// lil's figures, as llm-inference-bench's `benchmark_results.json` holds them (only a
    /// lil run has them; llama_benchy then holds no benchmark).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lil: Option<lil::LilReport>,
    /// What the questions asked before measuring found, or that they were skipped.
    #[serde(default)]
    pub answer_check: String,
}

/// What a protocol run found and where it was written.
#[derive(Debug, serde::Serialize)]
pub struct ProtocolOutcome {
    pub report: ProtocolReport,
    pub saved: std::path::PathBuf,
    pub tool_file: Option<std::path::PathBuf>,
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
