//! A recipe's environment as a plan carries it: each variable a template kept until the node
//! is known — plain text, `{launch.FIELD}` filled per node (num_nodes, node_rank, node_host,
//! model_path, model_revision, runtime_cache_dir, cluster_id), and secrets taken from the
//! user's environment (shown as `<set>`). `recipe::env` reads the templates out of a recipe;
//! the plan renders them per node here. Pure.

use std::collections::BTreeMap;
use std::fmt;

use serde::ser::SerializeMap;
use serde::{Serialize, Serializer};

use crate::plan::secret::MASK;

/// A per-node value a v2 env template may name as `{launch.FIELD}`: the fields sparkrun
/// fills, all of them (a name it does not fill is refused when the recipe is read).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LaunchField {
    NumNodes,
    NodeRank,
    NodeHost,
    ModelPath,
    ModelRevision,
    RuntimeCacheDir,
    ClusterId,
}

impl LaunchField {
    pub const ALL: [LaunchField; 7] = [
        LaunchField::NumNodes,
        LaunchField::NodeRank,
        LaunchField::NodeHost,
        LaunchField::ModelPath,
        LaunchField::ModelRevision,
        LaunchField::RuntimeCacheDir,
        LaunchField::ClusterId,
    ];

    pub fn name(self) -> &'static str {
        match self {
            LaunchField::NumNodes => "num_nodes",
            LaunchField::NodeRank => "node_rank",
            LaunchField::NodeHost => "node_host",
            LaunchField::ModelPath => "model_path",
            LaunchField::ModelRevision => "model_revision",
            LaunchField::RuntimeCacheDir => "runtime_cache_dir",
            LaunchField::ClusterId => "cluster_id",
        }
    }

    pub fn parse(name: &str) -> Option<LaunchField> {
        LaunchField::ALL.into_iter().find(|f| f.name() == name)
    }

    /// Why a launch may have no value for this field (the count and rank always have one).
    fn missing(self) -> &'static str {
        match self {
            LaunchField::NumNodes | LaunchField::NodeRank => "it is always known",
            LaunchField::NodeHost => "the node's address is not known",
            LaunchField::ModelPath => "this launch has no model folder",
            LaunchField::ModelRevision => {
                "the model is a local folder, which has no Hub revision (serve it from the Hub, or write the value out)"
            }
            LaunchField::RuntimeCacheDir => "this launch has no runtime cache folder",
            LaunchField::ClusterId => "the job has no name",
        }
    }
}

/// One piece of an env template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum EnvPiece {
    Text(String),
    Launch(LaunchField),
}

/// One variable's value: pieces to join per node; `secret` when it holds a secret.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecipeEnvValue {
    pub pieces: Vec<EnvPiece>,
    pub secret: bool,
}

impl RecipeEnvValue {
    /// A plain value.
    pub fn text(value: impl Into<String>, secret: bool) -> RecipeEnvValue {
        RecipeEnvValue {
            pieces: vec![EnvPiece::Text(value.into())],
            secret,
        }
    }

    /// The template as written, `{launch.x}` where a per-node value goes.
    pub fn template(&self) -> String {
        self.pieces
            .iter()
            .map(|p| match p {
                EnvPiece::Text(t) => t.clone(),
                EnvPiece::Launch(f) => format!("{{launch.{}}}", f.name()),
            })
            .collect()
    }
}

/// The values `{launch.…}` fields take on one node.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecipeNode {
    pub num_nodes: u32,
    pub node_rank: u32,
    /// The node's address on the fabric.
    pub node_host: String,
    /// The model's folder inside the container.
    pub model_path: Option<String>,
    /// The commit the staged model is at.
    pub model_revision: Option<String>,
    /// The job's runtime cache as the rank sees it (`workload::runtime_cache`).
    pub runtime_cache_dir: Option<String>,
    /// The job's name.
    pub cluster_id: Option<String>,
}

/// The most bytes a text rendered from a recipe's templates (its command, one variable) may
/// grow to. The kernel takes at most 128 KiB as one word of a command line or one variable,
/// and 2 MiB for a whole command line with its environment: a template that grows past this
/// is a mistake or an attack, refused before it takes the machine's memory.
pub const MAX_RENDERED_BYTES: usize = 256 << 10;

/// Why a variable cannot be rendered on a node.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EnvRenderError {
    #[error("env.{var}: {{launch.{field}}} has no value on node {rank}: {why}")]
    Missing {
        var: String,
        field: &'static str,
        rank: u32,
        /// Why this launch has none.
        why: &'static str,
    },
    #[error(
        "env.{var}: the value grows past {} KiB on node {rank}; write it out shorter",
        MAX_RENDERED_BYTES >> 10
    )]
    TooLarge { var: String, rank: u32 },
}

/// A recipe's environment, by variable name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecipeEnv(pub BTreeMap<String, RecipeEnvValue>);

impl RecipeEnv {
    /// The `{launch.…}` fields any value needs.
    pub fn launch_fields(&self) -> Vec<LaunchField> {
        let mut out: Vec<LaunchField> = self
            .0
            .values()
            .flat_map(|v| &v.pieces)
            .filter_map(|p| match p {
                EnvPiece::Launch(f) => Some(*f),
                EnvPiece::Text(_) => None,
            })
            .collect();
        out.sort();
        out.dedup();
        out
    }

    /// The environment on one node.
    pub fn render(&self, node: &RecipeNode) -> Result<BTreeMap<String, String>, EnvRenderError> {
        let mut out = BTreeMap::new();
        for (name, value) in &self.0 {
            let mut text = String::new();
            for piece in &value.pieces {
                match piece {
                    EnvPiece::Text(t) => text.push_str(t),
                    EnvPiece::Launch(f) => {
                        let v = launch_value(*f, node).ok_or(EnvRenderError::Missing {
                            var: name.clone(),
                            field: f.name(),
                            rank: node.node_rank,
                            why: f.missing(),
                        })?;
                        text.push_str(&v);
                    }
                }
                if text.len() > MAX_RENDERED_BYTES {
                    return Err(EnvRenderError::TooLarge {
                        var: name.clone(),
                        rank: node.node_rank,
                    });
                }
            }
            out.insert(name.clone(), text);
        }
        Ok(out)
    }

    /// Names of the variables that hold secrets.
    pub fn secret_names(&self) -> Vec<String> {
        self.0
            .iter()
            .filter(|(_, v)| v.secret)
            .map(|(k, _)| k.clone())
            .collect()
    }
}

fn launch_value(f: LaunchField, node: &RecipeNode) -> Option<String> {
    match f {
        LaunchField::NumNodes => Some(node.num_nodes.to_string()),
        LaunchField::NodeRank => Some(node.node_rank.to_string()),
        LaunchField::NodeHost => Some(node.node_host.clone()).filter(|h| !h.is_empty()),
        LaunchField::ModelPath => node.model_path.clone(),
        LaunchField::ModelRevision => node.model_revision.clone(),
        LaunchField::RuntimeCacheDir => node.runtime_cache_dir.clone(),
        LaunchField::ClusterId => node.cluster_id.clone(),
    }
}

/// Printed as templates, secrets as `<set>`.
impl Serialize for RecipeEnv {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut m = s.serialize_map(Some(self.0.len()))?;
        for (k, v) in &self.0 {
            if v.secret {
                m.serialize_entry(k, MASK)?;
            } else {
                m.serialize_entry(k, &v.template())?;
            }
        }
        m.end()
    }
}

impl fmt::Display for RecipeEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (k, v) in &self.0 {
            let shown = if v.secret {
                MASK.to_string()
            } else {
                v.template()
            };
            writeln!(f, "{k}={shown}")?;
        }
        Ok(())
    }
}
