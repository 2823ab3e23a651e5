//! Can this cluster run a profile? Node count, then memory per node: the memory plan
//! (`workload::memory`) of the profile's launch when its model's files can be read here (a
//! local folder, this machine's Hugging Face cache), else the profile's hand-written
//! `memory_gib` against each node's memory, else "not known", never a guess.
//!
//! A node's memory is its `MemTotal` where the GPU shares it (unified memory: a GB10);
//! another GPU's own memory is not probed. Pure.

use serde::Serialize;

use super::Profile;
use crate::derive::NodeInput;
use crate::model::footprint::Footprint;
use crate::workload::memory::{self, Fits, MemoryInput, unified_memory};
use crate::workload::partial::{self, LaunchAsk, PartialServe};

const GIB: f64 = (1u64 << 30) as f64;

/// Whether the cluster can run a profile.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(tag = "fit", content = "why", rename_all = "lowercase")]
pub enum Fit {
    Yes,
    No(Vec<String>),
    Unknown(Vec<String>),
}

impl Fit {
    pub fn label(&self) -> String {
        match self {
            Fit::Yes => "yes".into(),
            Fit::No(why) => format!("no: {}", why.join("; ")),
            Fit::Unknown(why) => format!("? {}", why.join("; ")),
        }
    }
}

/// Checks a profile against the nodes it would use (the first `nodes`, head first), with
/// its model's footprint when it could be read.
pub fn fit(p: &Profile, cluster: &[NodeInput], footprint: Option<&Footprint>) -> Fit {
    let need = p.nodes as usize;
    if cluster.len() < need {
        return Fit::No(vec![format!(
            "needs {need} node{}, the cluster has {}",
            if need == 1 { "" } else { "s" },
            cluster.len()
        )]);
    }
    let nodes = &cluster[..need];
    if let Some(f) = footprint
        && let Some(planned) = planned(p, nodes, f)
    {
        return planned;
    }
    let Some(mem) = p.memory_gib else {
        return match p.engine.serving() {
            Some(_) => Fit::Unknown(vec![format!(
                "memory of {} not known: {}",
                p.model_source()
                    .map_or_else(|| "its model".to_string(), |m| m.to_string()),
                footprint
                    .and_then(|f| f.weights.why_not().or(f.kv.why_not()))
                    .unwrap_or(
                        "its files are not on this machine and the profile gives no memory_gib"
                    )
            )]),
            None => Fit::Yes,
        };
    };
    let mut no = Vec::new();
    let mut unknown = Vec::new();
    for n in nodes {
        match unified_memory(n).map(|b| b as f64 / GIB) {
            Some(have) if have + 0.5 < mem => no.push(format!(
                "needs {mem:.0} GiB per node (memory_gib), {} has {have:.0} GiB",
                n.name
            )),
            Some(_) => {}
            None => unknown.push(format!("memory of {} not known", n.name)),
        }
    }
    if !no.is_empty() {
        Fit::No(no)
    } else if !unknown.is_empty() {
        Fit::Unknown(unknown)
    } else {
        Fit::Yes
    }
}

/// The verdict of the memory plan of `p`'s launch on `nodes`, when it gives one.
fn planned(p: &Profile, nodes: &[NodeInput], f: &Footprint) -> Option<Fit> {
    let Ok(LaunchAsk::Serve(ask)) = p.ask(&p.name) else {
        return None;
    };
    let r = partial::layer(*ask, PartialServe::default()).ok()?;
    let engine = r.engine.engine();
    let m = memory::plan(&MemoryInput {
        model: &r.serve.model.served_name(),
        footprint: f,
        engine: &engine.memory(&r.serve, &r.tuning),
        engine_title: engine.title(),
        tp: r.serve.tp,
        pp: r.serve.pp,
        gpus_per_node: r.serve.gpus_per_node,
        nodes,
        ask: &r.serve.memory,
    });
    let g = |v: Option<f64>| v.map_or_else(|| "?".into(), |v| format!("{v:.0}"));
    let no: Vec<String> = m
        .plan
        .nodes
        .iter()
        .filter(|(_, n)| n.fits == Fits::No)
        .map(|(name, n)| {
            format!(
                "{name} needs {} GiB, {} may take {} GiB of its {} GiB",
                g(n.need_gib),
                engine.title(),
                g(n.engine_gib),
                g(n.have_gib)
            )
        })
        .collect();
    if !no.is_empty() || !m.problems.is_empty() {
        return Some(Fit::No(if no.is_empty() {
            m.problems.iter().map(|p| p.problem.clone()).collect()
        } else {
            no
        }));
    }
    if m.plan.nodes.values().all(|n| n.fits == Fits::Yes) {
        return Some(Fit::Yes);
    }
    // The plan could not tell (memory of a node, the KV cache): the hand-written figure may.
    None
}
