//! Can this cluster run a profile? Node count and memory per node, from probed facts.
//!
//! Memory: a DGX Spark's GB10 shares one pool between CPU and GPU (unified memory), so its
//! `MemTotal` is what a model's share must fit in (a node whose driver lists a GB10, or an
//! aarch64 node with the NVIDIA driver but no GPU list). Other GPUs' memory is not probed, so
//! their fit is "unknown", never a guess. Pure.

use serde::Serialize;

use super::Profile;
use crate::derive::NodeInput;
use crate::node::NodeName;

/// What one node offers.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Capacity {
    pub node: NodeName,
    /// GPU-usable memory in GiB, when known.
    pub memory_gib: Option<f64>,
}

/// A node's capacity from its facts.
pub fn capacity(node: &NodeInput) -> Capacity {
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
    Capacity {
        node: node.name.clone(),
        memory_gib: if unified {
            f.host.mem_total_kib.map(|k| k as f64 / (1024.0 * 1024.0))
        } else {
            None
        },
    }
}

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

/// Checks a profile against the nodes it would use (the first `nodes`, head first).
pub fn fit(p: &Profile, cluster: &[Capacity]) -> Fit {
    let need = p.nodes as usize;
    if cluster.len() < need {
        return Fit::No(vec![format!(
            "needs {need} node{}, the cluster has {}",
            if need == 1 { "" } else { "s" },
            cluster.len()
        )]);
    }
    let Some(mem) = p.memory_gib else {
        return Fit::Yes;
    };
    let mut no = Vec::new();
    let mut unknown = Vec::new();
    for c in &cluster[..need] {
        match c.memory_gib {
            Some(have) if have + 0.5 < mem => no.push(format!(
                "needs {mem:.0} GiB per node, {} has {have:.0} GiB",
                c.node
            )),
            Some(_) => {}
            None => unknown.push(format!("memory of {} not known", c.node)),
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
