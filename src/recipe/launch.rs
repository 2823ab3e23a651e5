//! What a recipe asks spark-launch to run, engine-neutral: the engine, image, model and
//! revision, tp/pp and the nodes they fill, the engine's words as the recipe says them, the
//! environment (per-node templates kept as templates), the commands to run first (`pre_exec`),
//! the mods as folders, Ray or not, and every warning. The serving planner turns it into a job; nothing here plans. Also whether a
//! cluster of N nodes can take it. Pure.

use std::collections::BTreeMap;

use serde::Serialize;
use yaml_serde::Value;

use crate::plan::secret::Secret;
use crate::workload::engines::EngineKind;
use crate::workload::engines::speculative::RecipeDraft;

use super::RecipeFormat;
use super::env::RecipeEnv;
use super::error::{RecipeError, RecipeWarning};
use super::mods::RecipeMod;

/// Where the engine's words came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CommandSource {
    /// The recipe's `command:`, rendered.
    Recipe,
    /// Built from `defaults` with the runtime's flag table (v2 without `command:`).
    FlagTable,
}

/// How many nodes the recipe accepts (`min_nodes`/`max_nodes`, `cluster_only`/`solo_only`).
pub use crate::workload::partial::NodeBounds;

/// A model the recipe's engine loads besides its model (a speculative draft its settings name,
/// a `distribution_config` entry), staged beside it before the start.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct OtherModel {
    /// `ORG/NAME` on the Hub.
    pub repo: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
    /// The ranks whose nodes get it (0: the head); `None`: every node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ranks: Option<Vec<usize>>,
    /// The recipe field that names it (`defaults.speculative_config`).
    pub field: String,
}

impl From<RecipeDraft> for OtherModel {
    fn from(d: RecipeDraft) -> OtherModel {
        OtherModel {
            repo: d.repo,
            revision: d.revision,
            ranks: None,
            field: format!("defaults.{}", d.setting),
        }
    }
}

/// One recipe, read and checked, ready for the serving planner.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RecipeLaunch {
    /// The recipe file.
    pub file: String,
    /// The file's text, to locate problems found once the recipe is read.
    #[serde(skip)]
    pub text: String,
    pub format: RecipeFormat,
    /// `name:` (v1), else the file name without `.yaml`.
    pub name: String,
    pub engine: EngineKind,
    /// `container:`; `None` when a v2 recipe names none (the engine's default image applies).
    pub image: Option<String>,
    /// A Hub repo id or a folder, as the recipe names it.
    pub model: String,
    pub model_revision: Option<String>,
    pub tp: u32,
    pub pp: u32,
    pub gpus_per_node: u32,
    /// Nodes the job fills: tp × pp ÷ gpus_per_node.
    pub nodes: u32,
    pub node_bounds: NodeBounds,
    /// The engine's words, program first (`vllm serve …`), before spark-launch adds ranks,
    /// rendezvous, port and bind. Without `--api-key` (see `api_key`).
    pub argv: Vec<String>,
    pub command: CommandSource,
    /// Commands the recipe's command runs before the engine's (a script: `if …; fi &&`), as
    /// written with their joining operator: run on the head, in the bash that then starts the
    /// engine. Only for an engine whose runner hands the command to bash whole, on one node.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub before_engine: Option<String>,
    pub env: RecipeEnv,
    /// v2 `pre_exec`: commands run in every container before its mods and its engine,
    /// rendered.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub pre_exec: Vec<String>,
    /// Resolved mod folders, in the recipe's order.
    pub mods: Vec<RecipeMod>,
    /// vLLM over Ray (`--distributed-executor-backend ray`, or a `vllm-ray`/`eugr-vllm` runtime).
    pub ray: bool,
    /// An `--api-key` the recipe's command carried, taken out of `argv`.
    pub api_key: Option<Secret>,
    /// v2 `executor_config`, as written: only its `entrypoint` is applied (below); the other
    /// settings are spark-launch's (warned about).
    pub executor_config: BTreeMap<String, Value>,
    /// v2 `executor_config.entrypoint`: `Some("")` clears the image's entrypoint in every
    /// container, `Some(program)` replaces it, `None` keeps the image's (or the engine's).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<String>,
    /// Models to stage beside the model, each once.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub models: Vec<OtherModel>,
    pub min_sparkrun_version: Option<String>,
    /// An eugr (v1) recipe run solo, as eugr's runner runs it (`solo_only`, or a cluster of
    /// one node): one node, no Ray.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub solo: bool,
    pub warnings: Vec<RecipeWarning>,
}

impl RecipeLaunch {
    /// What stops this recipe from running on a cluster of `nodes` nodes (empty: it fits).
    pub fn fit(&self, nodes: u32) -> Vec<RecipeError> {
        let mut out = Vec::new();
        if nodes < self.nodes {
            out.push(
                RecipeError::new(
                    &self.file,
                    "",
                    format!(
                        "tp × pp = {} × {} needs {} node{} of {} GPU{}; the cluster has {nodes}",
                        self.tp,
                        self.pp,
                        self.nodes,
                        plural(self.nodes),
                        self.gpus_per_node,
                        plural(self.gpus_per_node)
                    ),
                )
                .fix("add nodes, or lower tensor_parallel with --set if the model fits"),
            );
        }
        if nodes < self.node_bounds.min {
            out.push(
                RecipeError::new(
                    &self.file,
                    "min_nodes",
                    format!(
                        "the recipe needs at least {} nodes; the cluster has {nodes}",
                        self.node_bounds.min
                    ),
                )
                .fix("add nodes (spark-launch nodes add ADDRESS)"),
            );
        }
        out
    }
}

fn plural(n: u32) -> &'static str {
    if n == 1 { "" } else { "s" }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(tp: u32, min: u32) -> RecipeLaunch {
        RecipeLaunch {
            file: "r.yaml".into(),
            text: String::new(),
            format: RecipeFormat::V2,
            name: "r".into(),
            engine: EngineKind::Vllm,
            image: None,
            model: "org/m".into(),
            model_revision: None,
            tp,
            pp: 1,
            gpus_per_node: 1,
            nodes: tp,
            node_bounds: NodeBounds { min, max: None },
            argv: vec![],
            command: CommandSource::Recipe,
            before_engine: None,
            env: RecipeEnv::default(),
            pre_exec: vec![],
            mods: vec![],
            ray: false,
            api_key: Secret::new("sk-1"),
            executor_config: BTreeMap::new(),
            entrypoint: None,
            models: Vec::new(),
            min_sparkrun_version: None,
            solo: false,
            warnings: vec![],
        }
    }

    #[test]
    fn too_few_nodes_is_a_named_problem_not_a_crash() {
        let problems = launch(4, 2).fit(1);
        let text: Vec<String> = problems.iter().map(|p| p.to_string()).collect();
        assert_eq!(
            text,
            [
                "r.yaml: tp × pp = 4 × 1 needs 4 nodes of 1 GPU; the cluster has 1; add nodes, or lower tensor_parallel with --set if the model fits",
                "r.yaml: min_nodes: the recipe needs at least 2 nodes; the cluster has 1; add nodes (spark-launch nodes add ADDRESS)"
            ]
        );
        assert!(launch(2, 2).fit(2).is_empty());
    }

    #[test]
    fn an_api_key_never_prints() {
        let json = serde_json::to_string(&launch(1, 1)).unwrap();
        assert!(json.contains("\"api_key\":\"<set>\""), "{json}");
        assert!(!json.contains("sk-1"));
    }
}
