//! `spark-launch registry add|list|remove`: the recipe registries kept for `up NAME`,
//! `up @REGISTRY/NAME` and `profiles --recipes` (a local folder, or a git URL cloned once).
//! Flags and glue over `recipe::kept`.

use std::path::PathBuf;

use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};

use super::{CmdResult, Context, Outcome, print_json, print_out};
use crate::registries::{self as kept, KeptError, KeptRegistry};

#[derive(Debug, clap::Subcommand)]
pub enum RegistryCommand {
    /// Keep a registry: a local folder (read where it is), or a git URL (cloned once into
    /// spark-launch's data folder).
    Add {
        /// A folder, or a git URL (https://…, file://…, git@…).
        source: String,
        /// How recipes and mods name it (`@NAME/…`) [default: the source's last word].
        #[arg(long)]
        name: Option<String>,
    },
    /// The registries kept, in the order they are searched (after any `--registry DIR`).
    List,
    /// Forget a registry (a clone spark-launch made is deleted; a folder of yours stays).
    Remove { name: String },
}

/// `$XDG_CONFIG_HOME/spark-launch/registries.yaml`.
pub fn kept_file() -> PathBuf {
    super::default_cluster_file()
        .parent()
        .map(|p| p.join("registries.yaml"))
        .unwrap_or_else(|| PathBuf::from("registries.yaml"))
}

/// `$XDG_DATA_HOME/spark-launch/registries` (else `~/.local/share/…`): where URLs are cloned.
fn clones_dir() -> PathBuf {
    std::env::var_os("XDG_DATA_HOME")
        .filter(|v| !v.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/share")))
        .unwrap_or_else(|| PathBuf::from(".local/share"))
        .join("spark-launch")
        .join("registries")
}

fn table(kept: &[KeptRegistry]) -> String {
    if kept.is_empty() {
        return "no registries kept (add one: spark-launch registry add DIR|URL)".to_string();
    }
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header(vec!["name", "source", "folder"]);
    for k in kept {
        t.add_row(vec![
            k.name.clone(),
            k.source.clone(),
            k.path.display().to_string(),
        ]);
    }
    t.to_string()
}

/// A failed change of the list: the user's to fix, but a read or a clone that failed.
fn failed(e: KeptError) -> super::CmdError {
    match e {
        KeptError::Io { .. } | KeptError::Clone { .. } => anyhow::Error::from(e).into(),
        e => super::CmdError {
            code: 2,
            error: e.into(),
        },
    }
}

pub async fn run(command: RegistryCommand, ctx: &Context) -> CmdResult {
    let file = kept_file();
    match command {
        RegistryCommand::Add { source, name } => {
            let k = kept::add(&file, &clones_dir(), &source, name.as_deref()).map_err(failed)?;
            if ctx.json {
                print_json(&k)?;
            } else {
                print_out(&format!(
                    "kept registry {} ({}): recipes by name with spark-launch up NAME or @{}/NAME",
                    k.name,
                    k.path.display(),
                    k.name
                ));
            }
        }
        RegistryCommand::List => {
            let k = kept::read(&file).map_err(failed)?;
            if ctx.json {
                print_json(&k)?;
            } else {
                print_out(&table(&k));
            }
        }
        RegistryCommand::Remove { name } => {
            let k = kept::remove(&file, &name).map_err(failed)?;
            if ctx.json {
                print_json(&k)?;
            } else if k.cloned {
                print_out(&format!(
                    "removed {} and its clone {}",
                    k.name,
                    k.path.display()
                ));
            } else {
                print_out(&format!(
                    "removed {} (the folder {} stays)",
                    k.name,
                    k.path.display()
                ));
            }
        }
    }
    Ok(Outcome::Success)
}
