//! The memory plan of a serving launch: per node, the weights it holds, the KV cache for the
//! launch's context and sequences, a reserve for activations and the runtime, against the
//! node's memory, the engine's own fraction of it, and the cap every serving container gets.
//!
//! Why: on unified memory (a DGX Spark's GB10 shares one pool between CPU and GPU) an engine
//! that takes more than there is does not fail with out-of-memory, it hangs the whole host. So
//! a launch that does not fit is refused before anything is copied or started, with the
//! figures and the ways out (more nodes, a shorter context, a quantized variant), unless
//! `--allow-overcommit` says to go on; and every container is capped (Docker's memory and swap
//! limits, equal) below the node's memory, leaving the host a floor, so an engine that
//! over-allocates is killed inside its container while the node stays reachable.
//!
//! The rules:
//! - Weights per node: the model's bytes (its safetensors index's `total_size`, or its weight
//!   files' sizes) split over the `tp × pp` ranks, times the ranks on the node. Expert
//!   parallelism moves experts between the same ranks: the bytes per rank stay the same.
//! - KV cache per node: `footprint::KvLayout` for the context (the engine's flag, else the
//!   model's `max_position_embeddings`) and the sequences (the engine's flag, else one: an
//!   engine refuses to start unless one sequence of the whole context fits), in the KV dtype
//!   (the engine's flag, else the model's dtype).
//! - Reserve: [`RESERVE_PER_RANK`] per rank, for the CUDA context, PyTorch's and NCCL's
//!   buffers, CUDA graphs and the activations of the engine's profiling run (vLLM logs peaks of
//!   1.4–5.3 GiB for 2k–8k batched tokens on a GB10).
//! - What the node has: its `MemTotal`, on nodes whose GPU shares it (a GB10, or an aarch64
//!   node with the NVIDIA driver but no GPU list); another GPU's own memory is not probed, so
//!   its fit is not known.
//! - The cap: `MemTotal` less [`HOST_FLOOR`], or `--memory-limit`; none when `MemTotal` is not
//!   recorded and no limit was given (said in the plan).
//! - It fits when the need is within both the engine's share (its fraction of the node) and the
//!   cap, and the engine's share is within the cap (else the engine is killed at the cap while
//!   it allocates).
//!
//! What is not known (no `config.json`, no index, no `MemTotal`) is said as not known, never a
//! guessed number. Pure.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::derive::NodeInput;
use crate::model::footprint::{Footprint, KvLayout, dtype_bytes};
use crate::node::NodeName;
use crate::workload::serve::Problem;

const GIB: f64 = (1u64 << 30) as f64;

/// What the host keeps outside every serving container: the kernel and its page tables for a
/// 110 GiB process (≈ 0.5 GiB), sshd, dockerd, containerd and systemd's services (≈ 1 GiB), DGX
/// OS's desktop session (≈ 1.5 GiB), a page cache for the binaries and libraries that run so
/// they are not thrashed (≈ 1 GiB), and room for a login, `docker` and the supervisor's SSH
/// sessions (≈ 1 GiB): 5 GiB, rounded up to 6. On a Spark (`MemTotal` ≈ 119 GiB) the cap is
/// then ≈ 113 GiB, below the 116–118 GiB other setups cap a rank at, and above what vLLM takes
/// at its default `--gpu-memory-utilization 0.9` (≈ 107 GiB) plus its process.
pub const HOST_FLOOR: u64 = 6 << 30;

/// The memory each rank keeps beyond weights and KV cache (see the module docs).
pub const RESERVE_PER_RANK: u64 = 4 << 30;

/// What the user asked about memory (`--memory-limit`, a profile's `memory_limit`,
/// `--allow-overcommit`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemoryAsk {
    /// The cap on every serving container, in bytes, instead of `MemTotal` less the floor.
    pub limit: Option<u64>,
    /// Start a launch that does not fit anyway.
    pub allow_overcommit: bool,
}

/// `110G`, `110GiB`, `512M`, `512MiB` or a bare number of GiB (`110`, `0.5`): bytes.
pub fn parse_memory_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let (num, unit) = [
        ("tib", 1u64 << 40),
        ("gib", 1 << 30),
        ("mib", 1 << 20),
        ("t", 1 << 40),
        ("g", 1 << 30),
        ("m", 1 << 20),
    ]
    .iter()
    .find_map(|(suffix, unit)| lower.strip_suffix(suffix).map(|n| (n.to_string(), *unit)))
    .unwrap_or((lower.clone(), 1 << 30));
    let bad = || {
        format!("expected a size such as 110G, 110GiB or 512M (a bare number is GiB), got {s:?}")
    };
    let n: f64 = num.trim().parse().map_err(|_| bad())?;
    if !n.is_finite() || n <= 0.0 {
        return Err(bad());
    }
    let bytes = n * unit as f64;
    if bytes < (64 << 20) as f64 || bytes > (1u64 << 50) as f64 {
        return Err(format!(
            "{s}: a memory limit between 64M and 1P (a container below 64 MiB cannot start an engine)"
        ));
    }
    Ok(bytes as u64)
}

/// What the engine's fraction is a fraction of.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum FractionOf {
    /// The node's memory: weights, activations and KV cache all come out of it (vLLM's
    /// `--gpu-memory-utilization`, SGLang's `--mem-fraction-static`).
    Total,
    /// The memory left after the weights and activations, for the KV cache alone
    /// (TensorRT-LLM's `free_gpu_memory_fraction`).
    FreeAfterWeights,
}

/// The engine's fraction: given, its fixed default, or a default it derives at start by
/// leaving a reserve of the node's memory (SGLang); or none, for an engine that allocates
/// only its weights and the KV cache of its context (llama.cpp).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum EngineFraction {
    Given(f64),
    Default(f64),
    LeavesReserve(u64),
    AsNeeded,
}

impl EngineFraction {
    /// The fraction on a node with `have` bytes.
    pub fn of(&self, have: u64) -> f64 {
        match *self {
            EngineFraction::Given(f) | EngineFraction::Default(f) => f,
            EngineFraction::LeavesReserve(r) if have > r => {
                ((have - r) as f64 / have as f64 * 1000.0).round() / 1000.0
            }
            EngineFraction::LeavesReserve(_) | EngineFraction::AsNeeded => 0.0,
        }
    }
}

/// How an engine sizes its memory, read from the request by the engine itself
/// (`ServingEngine::memory`).
#[derive(Clone, Debug, PartialEq)]
pub struct EngineMemory {
    pub fraction: EngineFraction,
    pub fraction_of: FractionOf,
    /// The flag that sets the fraction (`--gpu-memory-utilization`).
    pub fraction_flag: &'static str,
    /// The context length the request gives, and the flag that gives it (`--max-model-len`).
    pub context: Option<u64>,
    pub context_flag: &'static str,
    /// The sequences at once the request gives, and the flag (`--max-num-seqs`).
    pub sequences: Option<u64>,
    pub sequences_flag: &'static str,
    /// The KV cache dtype the request gives (`fp8`, `auto`).
    pub kv_dtype: Option<String>,
}

/// Whether a node fits.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Fits {
    Yes,
    No,
    #[default]
    NotKnown,
}

/// One node's memory, in GiB (`None`: not known; the plan's `not_known` says why).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeMemory {
    pub weights_gib: Option<f64>,
    pub kv_cache_gib: Option<f64>,
    pub reserve_gib: f64,
    pub need_gib: Option<f64>,
    /// What the node has (`MemTotal`, shared with the GPU).
    pub have_gib: Option<f64>,
    /// The cap on its container.
    pub limit_gib: Option<f64>,
    /// The same cap in bytes, as the container gets it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit_bytes: Option<u64>,
    /// What the engine may take at its fraction.
    pub engine_gib: Option<f64>,
    pub fraction: Option<f64>,
    pub fits: Fits,
}

/// A serving launch's memory, per node (see the module docs).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct MemoryPlan {
    /// Per serving node.
    pub nodes: BTreeMap<NodeName, NodeMemory>,
    /// Where the weights figure came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub weights_from: Option<String>,
    /// The context length the KV cache is sized for, and where it came from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<u64>,
    #[serde(default)]
    pub context_from: String,
    pub sequences: u64,
    #[serde(default)]
    pub sequences_from: String,
    /// The KV cache's element type, as named (`bf16`, `fp8`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_dtype: Option<String>,
    /// The engine's fraction, as the plan takes it (`--gpu-memory-utilization 0.9`, default).
    #[serde(default)]
    pub fraction_from: String,
    /// What the host keeps beyond the cap.
    pub floor_gib: f64,
    /// What could not be known, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub not_known: Vec<String>,
    /// The launch does not fit and `--allow-overcommit` starts it anyway.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub overcommit: bool,
}

impl MemoryPlan {
    /// The cap on `node`'s container, in bytes.
    pub fn limit_bytes(&self, node: &NodeName) -> Option<u64> {
        self.nodes.get(node).and_then(|n| n.limit_bytes)
    }

    /// The plan's lines for the text printout.
    pub fn lines(&self) -> Vec<String> {
        let mut out = Vec::new();
        let g = |v: Option<f64>| v.map_or_else(|| "?".to_string(), |v| format!("{v:.1}"));
        for (node, m) in &self.nodes {
            out.push(format!(
                "{node}: need {} GiB (weights {} + KV cache {} + reserve {:.1}) · engine {} GiB{} · cap {} GiB · has {} GiB · fits {}",
                g(m.need_gib),
                g(m.weights_gib),
                g(m.kv_cache_gib),
                m.reserve_gib,
                g(m.engine_gib),
                m.fraction.map(|f| format!(" ({f})")).unwrap_or_default(),
                g(m.limit_gib),
                g(m.have_gib),
                match m.fits {
                    Fits::Yes => "yes",
                    Fits::No if self.overcommit => "NO (--allow-overcommit)",
                    Fits::No => "no",
                    Fits::NotKnown => "not known",
                }
            ));
        }
        let context = self
            .context
            .map_or_else(|| "?".to_string(), |c| c.to_string());
        out.push(format!(
            "KV cache for {} × {context} tokens ({}; {}) in {}; {}; weights from {}; the host keeps {:.0} GiB beyond the cap",
            self.sequences,
            self.sequences_from,
            self.context_from,
            self.kv_dtype.as_deref().unwrap_or("?"),
            self.fraction_from,
            self.weights_from.as_deref().unwrap_or("(not known)"),
            self.floor_gib
        ));
        for n in &self.not_known {
            out.push(format!("not known: {n}"));
        }
        out
    }
}

/// What the memory plan is made of.
pub struct MemoryInput<'a> {
    /// The model's name, for messages.
    pub model: &'a str,
    pub footprint: &'a Footprint,
    pub engine: &'a EngineMemory,
    /// `vLLM`: how messages name the engine.
    pub engine_title: &'a str,
    pub tp: u32,
    pub pp: u32,
    pub gpus_per_node: u32,
    /// The serving nodes, head first.
    pub nodes: &'a [NodeInput],
    pub ask: &'a MemoryAsk,
}

/// The memory plan, and the refusals when it does not fit (empty with `--allow-overcommit`,
/// whose warnings come back instead).
pub struct MemoryOutcome {
    pub plan: MemoryPlan,
    pub problems: Vec<Problem>,
    pub warnings: Vec<String>,
}

/// The memory a node's GPU can use, in bytes: its `MemTotal` when the GPU shares it (unified
/// memory: a GB10, or an aarch64 node with the NVIDIA driver but no GPU list); `None` for
/// other GPUs (their own memory is not probed) or when `MemTotal` is not recorded.
pub fn unified_memory(node: &NodeInput) -> Option<u64> {
    let f = &node.facts;
    let gb10 = f
        .host
        .gpus
        .iter()
        .any(|g| g.model.as_deref().is_some_and(|m| m.contains("GB10")));
    let unified = gb10
        || (f.host.gpus.is_empty()
            && f.arch.as_deref() == Some("aarch64")
            && f.host.nvidia_driver.is_present());
    if unified {
        f.host.mem_total_kib.map(|k| k * 1024)
    } else {
        None
    }
}

fn gib(bytes: f64) -> f64 {
    (bytes / GIB * 100.0).round() / 100.0
}

/// One node's figures in bytes, before rounding.
struct Figures {
    weights: Option<f64>,
    kv: Option<f64>,
    reserve: f64,
    have: Option<u64>,
    limit: Option<u64>,
}

impl Figures {
    fn need(&self) -> Option<f64> {
        Some(self.weights? + self.kv? + self.reserve)
    }
}

/// The engine's share of a node with `have` bytes, for a need of `weights + reserve`.
fn engine_share(e: &EngineMemory, have: u64, weights: Option<f64>, reserve: f64) -> Option<f64> {
    let f = e.fraction.of(have);
    match e.fraction_of {
        FractionOf::Total => Some(f * have as f64),
        FractionOf::FreeAfterWeights => {
            let fixed = weights? + reserve;
            Some(fixed + f * (have as f64 - fixed).max(0.0))
        }
    }
}

/// The memory plan of a launch (see the module docs).
pub fn plan(input: &MemoryInput<'_>) -> MemoryOutcome {
    let e = input.engine;
    let mut not_known = Vec::new();
    let ranks = u64::from(input.gpus_per_node.max(1));
    let world = (u64::from(input.tp) * u64::from(input.pp)).max(1);
    let weights = match &input.footprint.weights {
        crate::model::footprint::Known::Known(w) => {
            Some(w.bytes as f64 / world as f64 * ranks as f64)
        }
        crate::model::footprint::Known::NotKnown(why) => {
            not_known.push(format!("the weights of {}: {why}", input.model));
            None
        }
    };
    let kv_layout = match &input.footprint.kv {
        crate::model::footprint::Known::Known(k) => Some(k),
        crate::model::footprint::Known::NotKnown(why) => {
            not_known.push(format!("the KV cache of {}: {why}", input.model));
            None
        }
    };
    let (context, context_from) = match (e.context, kv_layout.and_then(|k| k.max_context)) {
        (Some(c), _) => (Some(c), format!("{} {c}", e.context_flag)),
        (None, Some(c)) => (Some(c), "the model's max_position_embeddings".to_string()),
        (None, None) => {
            if kv_layout.is_some() {
                not_known.push(format!(
                    "the context length: config.json has no max_position_embeddings; give {}",
                    e.context_flag
                ));
            }
            (None, "not known".to_string())
        }
    };
    let (sequences, sequences_from) = match e.sequences {
        Some(s) => (s.max(1), format!("{} {s}", e.sequences_flag)),
        None => (
            1,
            "one sequence of the whole context, what the engine needs to start".to_string(),
        ),
    };
    let model_elem = kv_layout.and_then(|k| k.dtype_bytes);
    let (elem, kv_dtype) = match e.kv_dtype.as_deref().filter(|d| *d != "auto") {
        Some(d) => match dtype_bytes(d) {
            Some(b) => (Some(b), Some(d.to_string())),
            None => {
                not_known.push(format!("the size of the KV cache dtype {d}"));
                (None, Some(d.to_string()))
            }
        },
        None => match model_elem {
            Some(b) => (
                Some(b),
                Some(format!("{} (the model's dtype)", elem_name(b))),
            ),
            // Engines load a model whose config names no dtype in bf16 (vLLM's `auto`
            // downcasts float32 to bf16): said as what it is.
            None if kv_layout.is_some() => (
                Some(2.0),
                Some(
                    "bf16 (config.json names no torch_dtype: engines load such a model in bf16)"
                        .into(),
                ),
            ),
            None => (None, None),
        },
    };
    let kv = match (kv_layout, context, elem) {
        (Some(k), Some(c), Some(b)) => Some(
            k.rank_bytes(
                c,
                sequences,
                (u64::from(input.tp), u64::from(input.pp)),
                b,
                model_elem.unwrap_or(2.0),
            ) * ranks as f64,
        ),
        _ => None,
    };
    let reserve = (RESERVE_PER_RANK * ranks) as f64;
    let mut plan = MemoryPlan {
        weights_from: input.footprint.weights.known().map(|w| w.from.clone()),
        context,
        context_from,
        sequences,
        sequences_from,
        kv_dtype,
        fraction_from: match e.fraction {
            EngineFraction::Given(f) => format!("{} {f}", e.fraction_flag),
            EngineFraction::Default(f) => {
                format!("{} {f} ({}'s default)", e.fraction_flag, input.engine_title)
            }
            EngineFraction::LeavesReserve(r) => format!(
                "{} as {} derives it at start (its memory less {:.1} GiB)",
                e.fraction_flag,
                input.engine_title,
                r as f64 / GIB
            ),
            EngineFraction::AsNeeded => format!(
                "no share: {} allocates its weights and the KV cache of its context ({})",
                input.engine_title, e.context_flag
            ),
        },
        floor_gib: gib(HOST_FLOOR as f64),
        ..MemoryPlan::default()
    };
    let mut problems = Vec::new();
    let mut misfits: Vec<(NodeName, Figures, f64, String)> = Vec::new();
    let mut no_have = Vec::new();
    let mut no_cap = Vec::new();
    for n in input.nodes {
        let have = unified_memory(n);
        let total = n.facts.host.mem_total_kib.map(|k| k * 1024);
        if have.is_none() {
            no_have.push(n.name.to_string());
        }
        let limit = match (input.ask.limit, total) {
            (Some(l), Some(t)) if l > t => {
                problems.push(Problem::new(format!(
                        "--memory-limit {:.1} GiB is more than {} has ({:.1} GiB): it would cap nothing",
                        l as f64 / GIB,
                        n.name,
                        t as f64 / GIB
                    ), format!(
                        "give --memory-limit at most {:.0}G (the node's memory less what the host needs)",
                        (t.saturating_sub(HOST_FLOOR)) as f64 / GIB
                    )));
                Some(l)
            }
            (Some(l), _) => Some(l),
            (None, Some(t)) => Some(t.saturating_sub(HOST_FLOOR)),
            (None, None) => {
                no_cap.push(n.name.to_string());
                None
            }
        };
        let fig = Figures {
            weights,
            kv,
            reserve,
            have,
            limit,
        };
        let need = fig.need();
        let engine = have.and_then(|h| engine_share(e, h, weights, reserve));
        let mut why = Vec::new();
        if let (Some(need), Some(engine)) = (need, engine)
            && need > engine
        {
            why.push(format!(
                "{} takes at most {:.1} GiB there ({})",
                input.engine_title,
                engine / GIB,
                plan.fraction_from
            ));
        }
        if let (Some(need), Some(limit)) = (need, limit)
            && need > limit as f64
        {
            why.push(format!(
                "its container's cap is {:.1} GiB",
                limit as f64 / GIB
            ));
        }
        // A fraction is written with a few decimals: a share within 256 MiB of the cap is
        // the cap.
        if let (Some(engine), Some(limit)) = (engine, limit)
            && engine > (limit + (256 << 20)) as f64
            && e.fraction_of == FractionOf::Total
        {
            why.push(format!(
                "{} would allocate {:.1} GiB, above the container's cap of {:.1} GiB, and be killed there",
                input.engine_title,
                engine / GIB,
                limit as f64 / GIB
            ));
        }
        let fits = match (need, engine) {
            _ if !why.is_empty() => Fits::No,
            (Some(_), Some(_)) => Fits::Yes,
            _ => Fits::NotKnown,
        };
        plan.nodes.insert(
            n.name.clone(),
            NodeMemory {
                weights_gib: weights.map(gib),
                kv_cache_gib: kv.map(gib),
                reserve_gib: gib(reserve),
                need_gib: need.map(gib),
                have_gib: have.map(|h| gib(h as f64)),
                limit_gib: limit.map(|l| gib(l as f64)),
                limit_bytes: limit,
                engine_gib: engine.map(gib),
                fraction: have.map(|h| e.fraction.of(h)),
                fits: fits.clone(),
            },
        );
        if fits == Fits::No {
            misfits.push((n.name.clone(), fig, engine.unwrap_or(0.0), why.join("; ")));
        }
    }
    if !no_have.is_empty() {
        not_known.push(format!(
            "the memory the GPU can use on {}: only a GPU that shares MemTotal (a GB10) is known; another GPU's own memory is not probed",
            no_have.join(", ")
        ));
    }
    if !no_cap.is_empty() {
        not_known.push(format!(
            "MemTotal of {} (not recorded in its snapshot): its container is not capped; give --memory-limit",
            no_cap.join(", ")
        ));
    }
    plan.not_known = not_known;
    let mut warnings = Vec::new();
    if !misfits.is_empty() {
        let problem = misfit_problem(input, kv_layout, &plan, &misfits);
        if input.ask.allow_overcommit {
            plan.overcommit = true;
            warnings.push(format!(
                "starting anyway (--allow-overcommit): {}; the host may lock up instead of failing with out-of-memory",
                problem.what
            ));
        } else {
            problems.push(problem);
        }
    }
    MemoryOutcome {
        plan,
        problems,
        warnings,
    }
}

fn elem_name(bytes: f64) -> &'static str {
    match bytes {
        b if b >= 4.0 => "fp32",
        b if b >= 2.0 => "bf16",
        b if b >= 1.0 => "fp8",
        _ => "fp4",
    }
}

/// The refusal of a launch that does not fit: every node's figures, and the ways out.
fn misfit_problem(
    input: &MemoryInput<'_>,
    kv: Option<&KvLayout>,
    plan: &MemoryPlan,
    misfits: &[(NodeName, Figures, f64, String)],
) -> Problem {
    let e = input.engine;
    let per_node: Vec<String> = misfits
        .iter()
        .map(|(node, f, _, why)| {
            format!(
                "{node} needs {:.1} GiB (weights {:.1} + KV cache {:.1} for {} × {} tokens + reserve {:.1}) of its {} GiB, but {why}",
                f.need().unwrap_or(0.0) / GIB,
                f.weights.unwrap_or(0.0) / GIB,
                f.kv.unwrap_or(0.0) / GIB,
                plan.sequences,
                plan.context.unwrap_or(0),
                f.reserve / GIB,
                f.have.map_or_else(|| "?".into(), |h| format!("{:.1}", h as f64 / GIB))
            )
        })
        .collect();
    let mut ways = Vec::new();
    // The tightest node decides.
    let budget = misfits
        .iter()
        .map(|(_, f, engine, _)| {
            let mut b = f.limit.map_or(f64::MAX, |l| l as f64);
            if *engine > 0.0 {
                b = b.min(*engine);
            }
            b
        })
        .fold(f64::MAX, f64::min);
    let ranks = f64::from(input.gpus_per_node.max(1));
    let tokens = plan.context.unwrap_or(0);
    let elem_of = || {
        let m = kv?.dtype_bytes.unwrap_or(2.0);
        let d = plan
            .kv_dtype
            .as_deref()
            .and_then(|d| dtype_bytes(d.split(' ').next().unwrap_or(d)))
            .unwrap_or(m);
        Some((d, m))
    };
    let weights_total = input.footprint.weights.known().map(|w| w.bytes as f64);
    // More nodes: the smallest world of whole nodes whose share fits.
    if let (Some(w), Some(k), Some((elem, state))) = (weights_total, kv, elem_of()) {
        let per_node = u64::from(input.gpus_per_node.max(1));
        let now = u64::from(input.tp) * u64::from(input.pp);
        let fits_at = (now + 1..=64).find(|world| {
            world.is_multiple_of(per_node) && k.tp_fits(*world) && {
                let need = w / *world as f64 * ranks
                    + k.rank_bytes(tokens, plan.sequences, (*world, 1), elem, state) * ranks
                    + (RESERVE_PER_RANK as f64) * ranks;
                need <= budget
            }
        });
        if let Some(world) = fits_at {
            ways.push(format!(
                "more nodes: {} node{} (--tp {world}) hold it",
                world / per_node,
                if world / per_node == 1 { "" } else { "s" }
            ));
        }
    }
    // A shorter context: the longest that fits, rounded down to 1024 tokens.
    if let (Some(w), Some(k), Some((elem, state))) = (weights_total, kv, elem_of()) {
        let fixed = w / (u64::from(input.tp) * u64::from(input.pp)).max(1) as f64 * ranks
            + RESERVE_PER_RANK as f64 * ranks;
        let at = |t: u64| {
            fixed
                + k.rank_bytes(
                    t,
                    plan.sequences,
                    (u64::from(input.tp), u64::from(input.pp)),
                    elem,
                    state,
                ) * ranks
        };
        if at(1024) <= budget {
            let (mut lo, mut hi) = (1024u64, tokens.max(1024));
            while lo < hi {
                let mid = lo + (hi - lo).div_ceil(2);
                if at(mid) <= budget {
                    lo = mid
                } else {
                    hi = mid - 1
                }
            }
            let fit = lo / 1024 * 1024;
            if fit >= 1024 && fit < tokens {
                ways.push(format!("a shorter context: {} {fit} fits", e.context_flag));
            }
        }
        if plan.sequences > 1 {
            ways.push(format!(
                "fewer sequences at once ({} lower)",
                e.sequences_flag
            ));
        }
    }
    if matches!(
        e.fraction,
        EngineFraction::Given(_) | EngineFraction::Default(_)
    ) && e.fraction_of == FractionOf::Total
        && let Some((_, f, engine, _)) = misfits.first()
        && let (Some(have), Some(limit), Some(need)) = (f.have, f.limit, f.need())
    {
        let most = (limit as f64 / have as f64 * 100.0).floor() / 100.0;
        if *engine > (limit + (256 << 20)) as f64 {
            ways.push(format!(
                "a share under the cap: {} {most:.2} or less (or a higher --memory-limit)",
                e.fraction_flag
            ));
        } else if need > *engine && need <= limit as f64 {
            ways.push(format!(
                "a larger share for the engine: {} {:.2} (at most {most:.2}, which stays under the cap)",
                e.fraction_flag,
                (need / have as f64 + 0.005).min(most)
            ));
        }
    }
    ways.push("a quantized variant of the model (FP8, NVFP4: about a half or a quarter of BF16's weights)".into());
    ways.push("or --allow-overcommit to start anyway (the host may lock up)".into());
    Problem::new(
        format!("{} does not fit: {}", input.model, per_node.join("; ")),
        ways.join("; "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::footprint::{Known, WeightsSize};
    use crate::probe::facts::GpuFacts;

    const GIB_U: u64 = 1 << 30;

    fn spark(name: &str) -> NodeInput {
        let mut facts: crate::probe::NodeFacts = serde_json::from_value(serde_json::json!({
            "hostname": name, "arch": "aarch64", "interfaces": [], "rdma_devices": [], "routes": []
        }))
        .unwrap();
        facts.host.gpus = vec![GpuFacts {
            bus: "000f:01:00.0".into(),
            model: Some("NVIDIA GB10".into()),
        }];
        // A Spark's MemTotal as the fixtures under tests/fixtures record it.
        facts.host.mem_total_kib = Some(124_830_604);
        NodeInput {
            name: NodeName::new(name).unwrap(),
            facts,
        }
    }

    fn vllm(context: Option<u64>) -> EngineMemory {
        EngineMemory {
            fraction: EngineFraction::Default(0.9),
            fraction_of: FractionOf::Total,
            fraction_flag: "--gpu-memory-utilization",
            context,
            context_flag: "--max-model-len",
            sequences: None,
            sequences_flag: "--max-num-seqs",
            kv_dtype: None,
        }
    }

    fn footprint(weights: u64) -> Footprint {
        let config = std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/models/nvidia--MiniMax-M2.7-NVFP4/config.json"),
        )
        .unwrap();
        Footprint {
            kv: Known::Known(KvLayout::parse(&config).unwrap()),
            weights: Known::Known(WeightsSize {
                bytes: weights,
                from: "test".into(),
            }),
        }
    }

    fn run(
        f: &Footprint,
        e: &EngineMemory,
        tp: u32,
        nodes: &[NodeInput],
        ask: &MemoryAsk,
    ) -> MemoryOutcome {
        plan(&MemoryInput {
            model: "org/model",
            footprint: f,
            engine: e,
            engine_title: "vLLM",
            tp,
            pp: 1,
            gpus_per_node: 1,
            nodes,
            ask,
        })
    }

    #[test]
    fn a_model_that_fits_two_sparks_gets_its_figures_and_a_cap_below_memtotal() {
        let nodes = [spark("a"), spark("b")];
        let p = run(
            &footprint(120 * GIB_U),
            &vllm(Some(32768)),
            2,
            &nodes,
            &MemoryAsk::default(),
        );
        assert!(p.problems.is_empty(), "{:?}", p.problems);
        let a = &p.plan.nodes[&nodes[0].name];
        assert_eq!(a.weights_gib, Some(60.0));
        assert_eq!(a.kv_cache_gib, Some(3.88));
        assert_eq!(a.reserve_gib, 4.0);
        assert_eq!(a.need_gib, Some(67.88));
        assert_eq!(a.have_gib, Some(119.05));
        assert_eq!(a.limit_gib, Some(113.05));
        assert_eq!(a.fits, Fits::Yes);
        assert_eq!(
            p.plan.limit_bytes(&nodes[0].name),
            Some(124_830_604 * 1024 - HOST_FLOOR)
        );
    }

    #[test]
    fn six_hundred_gb_of_weights_on_two_sparks_is_refused_with_the_figures_and_the_ways_out() {
        let nodes = [spark("a"), spark("b")];
        let p = run(
            &footprint(600_000_000_000),
            &vllm(Some(32768)),
            2,
            &nodes,
            &MemoryAsk::default(),
        );
        assert_eq!(p.problems.len(), 1);
        let text = p.problems[0].to_string();
        assert!(text.contains("a needs 287.3 GiB (weights 279.4"), "{text}");
        assert!(text.contains("vLLM takes at most 107.1 GiB"), "{text}");
        assert!(text.contains("more nodes: 8 nodes (--tp 8)"), "{text}");
        assert!(text.contains("quantized variant"), "{text}");
        assert!(text.contains("--allow-overcommit"), "{text}");
        // No context is short enough: the weights alone are more than a node.
        assert!(!text.contains("shorter context"), "{text}");
        // --allow-overcommit plans it, says so, and caps the containers all the same.
        let p = run(
            &footprint(600_000_000_000),
            &vllm(Some(32768)),
            2,
            &nodes,
            &MemoryAsk {
                limit: None,
                allow_overcommit: true,
            },
        );
        assert!(p.problems.is_empty());
        assert!(p.plan.overcommit);
        assert!(p.warnings[0].starts_with("starting anyway (--allow-overcommit)"));
        assert_eq!(p.plan.nodes[&nodes[1].name].limit_gib, Some(113.05));
    }

    #[test]
    fn a_model_that_fits_only_with_a_shorter_context_names_the_max_model_len_that_fits() {
        let nodes = [spark("a"), spark("b")];
        // 180 GiB of weights: 90 per node and the 4 GiB reserve leave 13.1 GiB of vLLM's
        // 107.1 GiB (0.9 of 119.05) for the KV cache: 111,140 tokens of 124 KiB each.
        let f = footprint(180 * GIB_U);
        let p = run(&f, &vllm(None), 2, &nodes, &MemoryAsk::default());
        let text = p.problems[0].to_string();
        assert!(text.contains("for 1 × 196608 tokens"), "{text}");
        assert!(
            text.contains("a shorter context: --max-model-len 110592 fits"),
            "{text}"
        );
        let p = run(&f, &vllm(Some(110_592)), 2, &nodes, &MemoryAsk::default());
        assert!(p.problems.is_empty(), "{:?}", p.problems);
        let p = run(&f, &vllm(Some(111_616)), 2, &nodes, &MemoryAsk::default());
        assert_eq!(p.problems.len(), 1);
    }

    #[test]
    fn the_kv_cache_grows_with_the_context_and_with_the_sequences() {
        let nodes = [spark("a"), spark("b")];
        let f = footprint(40 * GIB_U);
        let kv = |e: EngineMemory| {
            run(&f, &e, 2, &nodes, &MemoryAsk::default()).plan.nodes[&nodes[0].name]
                .kv_cache_gib
                .unwrap()
        };
        // Figures are rounded to 0.01 GiB.
        let close = |a: f64, b: f64| assert!((a - b).abs() <= 0.05, "{a} vs {b}");
        assert!(kv(vllm(Some(8192))) < kv(vllm(Some(65536))));
        close(kv(vllm(Some(8192))) * 8.0, kv(vllm(Some(65536))));
        let mut four = vllm(Some(8192));
        four.sequences = Some(4);
        assert_eq!(kv(four), kv(vllm(Some(32768))));
        let mut fp8 = vllm(Some(65536));
        fp8.kv_dtype = Some("fp8".into());
        close(kv(fp8) * 2.0, kv(vllm(Some(65536))));
    }

    #[test]
    fn what_is_not_known_is_said_and_never_replaced_by_a_number() {
        let mut old = spark("old");
        old.facts.host.mem_total_kib = None;
        let p = run(
            &Footprint::not_read("offline: no config.json"),
            &vllm(None),
            1,
            &[old],
            &MemoryAsk::default(),
        );
        assert!(p.problems.is_empty());
        let m = p.plan.nodes.values().next().unwrap();
        assert_eq!(
            (m.weights_gib, m.kv_cache_gib, m.need_gib),
            (None, None, None)
        );
        assert_eq!((m.have_gib, m.limit_gib), (None, None));
        assert_eq!(m.fits, Fits::NotKnown);
        let all = p.plan.not_known.join("\n");
        assert!(all.contains("offline: no config.json"), "{all}");
        assert!(all.contains("not recorded in its snapshot"), "{all}");
    }

    #[test]
    fn the_engine_s_share_above_the_cap_is_refused_and_a_limit_above_memtotal_too() {
        let nodes = [spark("a")];
        let mut e = vllm(Some(4096));
        e.fraction = EngineFraction::Given(0.97);
        let p = run(&footprint(10 * GIB_U), &e, 1, &nodes, &MemoryAsk::default());
        let text = p.problems[0].to_string();
        assert!(
            text.contains("would allocate 115.5 GiB, above the container's cap of 113.0 GiB"),
            "{text}"
        );
        let p = run(
            &footprint(10 * GIB_U),
            &vllm(Some(4096)),
            1,
            &nodes,
            &MemoryAsk {
                limit: Some(200 * GIB_U),
                allow_overcommit: false,
            },
        );
        assert!(
            p.problems[0].what.contains("would cap nothing"),
            "{:?}",
            p.problems
        );
    }

    #[test]
    fn memory_sizes_read_as_gib_unless_a_unit_says_otherwise() {
        assert_eq!(parse_memory_size("110"), Ok(110 * GIB_U));
        assert_eq!(parse_memory_size("110G"), Ok(110 * GIB_U));
        assert_eq!(parse_memory_size("110GiB"), Ok(110 * GIB_U));
        assert_eq!(parse_memory_size("512M"), Ok(512 << 20));
        assert_eq!(parse_memory_size("0.5"), Ok(512 << 20));
        assert!(parse_memory_size("1M").unwrap_err().contains("64M"));
        assert!(parse_memory_size("lots").is_err());
        assert!(parse_memory_size("-3G").is_err());
    }

    #[test]
    fn sglang_s_derived_default_leaves_its_reserve_of_the_node() {
        let f = EngineFraction::LeavesReserve(13 * GIB_U);
        assert_eq!(f.of(130 * GIB_U), 0.9);
        assert_eq!(EngineFraction::Given(0.8).of(1), 0.8);
    }
}
