//! Community recipes as they are: eugr/spark-vllm-docker's v1 recipes and sparkrun's v2
//! recipes (spark-arena/recipe-registry), read into one engine-neutral [`RecipeLaunch`] that
//! the serving planner runs — the engine's words as the recipe says them, its image, model,
//! shape, environment (per-node templates kept until the node is known), mods and warnings.
//!
//! Each runner has its own reading of the same YAML, and this follows each: v1's command is a
//! Python `str.format` template (`{{`/`}}` literal, a missing key an error), v2's is
//! substituted until stable with no escape and may be absent (then built from `defaults` with
//! the runtime's flag table). Everything spark-launch does not do is said: a warning when the
//! recipe still runs as meant, a refusal (exit 2) naming the field and the fix when it would
//! not.
//!
//! [`request`] turns a read recipe into the serving request the engine seam runs.
//!
//! Pure, except [`loader`], which reads the recipe file, walks a registry clone, looks for
//! mod folders and reads their files.

pub mod common;
pub mod detect;
mod distribution;
pub mod doc;
pub mod engine_line;
pub mod env;
pub mod error;
pub mod flags;
pub mod launch;
pub mod listing;
pub mod loader;
pub mod mods;
pub mod pyformat;
pub mod pyvalue;
pub mod registry;
pub mod request;
pub mod runtime;
pub mod sets;
pub mod shape;
pub mod substitute;
pub mod v1;
pub mod v2;
pub mod words;

use std::collections::BTreeMap;

pub use crate::workload::recipe_part::RecipeFormat;
pub use env::{RecipeEnv, RecipeNode};
pub use error::{RecipeError, RecipeErrors, RecipeWarning};
pub use launch::{CommandSource, NodeBounds, OtherModel, RecipeLaunch};
pub use mods::{ModFile, ModFiles, RecipeMod};

use crate::profile::SetArg;

/// What a recipe is read with besides its file.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RecipeInput {
    /// `--set KEY=VALUE`, over `defaults`.
    pub sets: Vec<SetArg>,
    /// The user's environment, for `$VAR` in v2 `env` values.
    pub user_env: BTreeMap<String, String>,
    /// GPUs per node (1 on a DGX Spark; 0 reads as 1).
    pub gpus_per_node: u32,
    /// `--ray`: keep a v1 recipe's Ray executor, which eugr's runner drops unless given
    /// `--ray`.
    pub ray: bool,
    /// The nodes of the cluster the recipe is planned on, when they are known before it is
    /// (the snapshots, hosts or nodes given, or the cluster file's): a v1 recipe on one node
    /// runs solo, as eugr's runner runs it there.
    pub nodes: Option<u32>,
}

/// A recipe read from its file, either format.
#[derive(Clone, Debug, PartialEq)]
pub enum Recipe {
    V1(v1::RecipeV1),
    V2(v2::RecipeV2),
}

/// Reads a recipe's text: format detected, fields checked, every problem at once. `stem` (the
/// file name without `.yaml`) names a recipe without `name:`.
pub fn parse(file: &str, stem: &str, text: &str) -> Result<Recipe, RecipeErrors> {
    let d = doc::load(file, text)?;
    let (format, note) = detect::format(&d)?;
    let mut recipe = match format {
        RecipeFormat::V1 => Recipe::V1(v1::parse(&d, stem)?),
        RecipeFormat::V2 => Recipe::V2(v2::parse(&d, stem)?),
    };
    let warnings = match &mut recipe {
        Recipe::V1(r) => &mut r.warnings,
        Recipe::V2(r) => &mut r.warnings,
    };
    let mut first: Vec<RecipeWarning> = note.into_iter().collect();
    first.extend(d.warnings.iter().cloned());
    warnings.splice(0..0, first);
    Ok(recipe)
}

impl Recipe {
    pub fn format(&self) -> RecipeFormat {
        match self {
            Recipe::V1(_) => RecipeFormat::V1,
            Recipe::V2(_) => RecipeFormat::V2,
        }
    }

    /// The mods as the recipe names them.
    pub fn mods(&self) -> &[String] {
        match self {
            Recipe::V1(r) => &r.mods,
            Recipe::V2(r) => &r.mods,
        }
    }

    pub fn file(&self) -> &str {
        match self {
            Recipe::V1(r) => &r.file,
            Recipe::V2(r) => &r.file,
        }
    }

    /// The recipe's text (for locating problems found later).
    pub fn text(&self) -> &str {
        match self {
            Recipe::V1(r) => &r.text,
            Recipe::V2(r) => &r.text,
        }
    }

    /// The launch the recipe asks for, with `input` applied and `mods` (resolved from
    /// [`Recipe::mods`]).
    pub fn build(
        &self,
        input: &RecipeInput,
        mods: Vec<RecipeMod>,
    ) -> Result<RecipeLaunch, RecipeErrors> {
        match self {
            Recipe::V1(r) => r.build(input, mods),
            Recipe::V2(r) => r.build(input, mods),
        }
    }
}
