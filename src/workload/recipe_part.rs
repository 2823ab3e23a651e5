//! What a community recipe adds to a serving plan beyond the options every launch takes
//! (`recipe::request` builds it): the recipe's environment, rendered per node and merged
//! under what spark-launch sets itself (the fabric variables derived per node, the staging's
//! `HF_HOME`/`HF_HUB_OFFLINE` win over a recipe's different value, with a warning naming both,
//! unless `--recipe-env`), its mods (their files put into every container before it starts,
//! each `run.sh` run before the engine, once per container), the served name it asks for, and
//! its name and warnings for the plan.
//!
//! The engine's own line is the engine's (`engines::split_recipe_args`); nothing here looks
//! at it. Pure: the part and the node in, the container changed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::recipe_env::{RecipeEnv, RecipeNode};
use crate::node::NodeName;
use crate::plan::ContainerSpec;
use crate::plan::secret::{MASK, is_secret_name};
use crate::plan::spec::{ContainerFile, FileContent};

use super::serve::Problem;

/// The two recipe formats.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RecipeFormat {
    /// eugr/spark-vllm-docker (`run-recipe.py`).
    V1,
    /// sparkrun (spark-arena).
    V2,
}

/// A mod's files, read for the plan: every file under its folder, by its path inside it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModFiles {
    /// The folder name: the files land in `/workspace/mods/<name>/`.
    pub name: String,
    /// As the recipe wrote it.
    pub reference: String,
    pub files: Vec<ModFile>,
}

/// One file of a mod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModFile {
    /// Inside the mod's folder, `/`-separated (`run.sh`, `patches/a.diff`).
    pub path: String,
    /// Its permission bits as read (`run.sh` is made executable in the container either way).
    pub mode: u32,
    pub bytes: Vec<u8>,
}

impl ModFiles {
    /// Bytes in all its files.
    pub fn size(&self) -> usize {
        self.files.iter().map(|f| f.bytes.len()).sum()
    }
}

/// Where a mod's folder lands in every container (as both recipe runners put it).
pub const MODS_DIR: &str = "/workspace/mods";

/// Variables derived per node even where derive leaves them unset on a node
/// (`NCCL_IB_GID_INDEX` when the HCAs disagree): a recipe's value for one of these is another
/// machine's guess, never taken without `--recipe-env`. `OMPI_MCA_*_if_include` too.
const FABRIC: [&str; 11] = [
    "NCCL_IB_HCA",
    "NCCL_IB_GID_INDEX",
    "NCCL_IB_DISABLE",
    "NCCL_SOCKET_IFNAME",
    "GLOO_SOCKET_IFNAME",
    "TP_SOCKET_IFNAME",
    "UCX_NET_DEVICES",
    "MASTER_ADDR",
    "VLLM_HOST_IP",
    "RAY_NODE_IP_ADDRESS",
    "RAY_OVERRIDE_NODE_IP_ADDRESS",
];

/// The script every container of a recipe with mods starts with: each mod's `run.sh` in its
/// folder, as both runners run it (`WORKSPACE_DIR` the container's working folder, `chmod +x`
/// then `./run.sh`), its output in the container's log; a mod that fails stops the container
/// with its last line in an `ERROR` line (the start then fails showing it). A mod applied once
/// is not applied again when the container restarts. Then the engine's own command.
const MODS_SH: &str = r#"set -u
export WORKSPACE_DIR="$PWD"
for m in $SL_MODS; do
  dir="/workspace/mods/$m"
  if [ -e "$dir/.spark-launch-applied" ]; then
    echo "spark-launch: mod $m: already applied in this container"
    continue
  fi
  echo "spark-launch: mod $m: running $dir/run.sh"
  out="/tmp/spark-launch-mod-$m.log"
  { (cd "$dir" && chmod +x run.sh && ./run.sh) 2>&1; echo $? >"$out.rc"; } | tee "$out"
  rc=$(cat "$out.rc" 2>/dev/null || echo 1)
  if [ "$rc" != 0 ]; then
    echo "spark-launch: ERROR mod $m failed (exit $rc): $(tail -n 1 "$out")"
    exit 1
  fi
  touch "$dir/.spark-launch-applied"
  echo "spark-launch: mod $m: applied"
done
exec "$@"
"#;

/// A recipe's part of a serving request.
#[derive(Clone, Debug, PartialEq)]
pub struct RecipePart {
    /// The recipe's name and file, for the plan and its messages.
    pub name: String,
    pub file: String,
    pub format: RecipeFormat,
    /// The program words the recipe starts the engine with (`vllm serve`).
    pub program: Vec<String>,
    /// The name `/v1/models` lists when the recipe says its own (`--served-model-name`).
    pub served_name: Option<String>,
    /// Its variables, per-node templates kept until the node is known.
    pub env: RecipeEnv,
    /// `--recipe-env`: the recipe's value wins over what spark-launch derives.
    pub keep_env: bool,
    pub mods: Vec<ModFiles>,
    /// What the recipe does differently here, said before it runs.
    pub warnings: Vec<String>,
}

/// The recipe as the plan shows it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RecipeSummary {
    pub name: String,
    pub file: String,
    pub format: RecipeFormat,
    /// The recipe's variables as written (`{launch.…}` templates kept, secrets `<set>`);
    /// each container's `env` holds the values on its node.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// The mods, in the order they run, each in `/workspace/mods/NAME`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mods: Vec<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl RecipePart {
    pub fn summary(&self) -> RecipeSummary {
        let env = self
            .env
            .0
            .iter()
            .map(|(k, v)| {
                let shown = if v.secret {
                    MASK.to_string()
                } else {
                    v.template()
                };
                (k.clone(), shown)
            })
            .collect();
        RecipeSummary {
            name: self.name.clone(),
            file: self.file.clone(),
            format: self.format,
            env,
            mods: self.mods.iter().map(|m| m.name.clone()).collect(),
            warnings: self.warnings.clone(),
        }
    }

    /// The recipe's variables on one node, or why a template cannot be filled there.
    pub fn render_env(&self, node: &RecipeNode) -> Result<BTreeMap<String, String>, Problem> {
        self.env.render(node).map_err(|e| {
            Problem::new(
                format!("{}: {e}", self.file),
                "write the value out in the recipe's env, or leave the variable out",
            )
        })
    }
}

/// Whether spark-launch sets `name` on a node itself (derived per node, or the staging's):
/// `derived` holds what it set on this node.
fn owned(name: &str, derived: &BTreeMap<String, String>) -> bool {
    derived.contains_key(name)
        || FABRIC.contains(&name)
        || (name.starts_with("OMPI_MCA_") && name.ends_with("_if_include"))
}

/// Merges one node's recipe variables (`values`) into its container's environment: a
/// variable the user gave with `--env` stays the user's; one spark-launch sets itself keeps
/// spark-launch's value (warned, naming both) unless `keep` (`--recipe-env`, noted); every
/// other variable is the recipe's.
pub fn merge_env(
    spec: &mut ContainerSpec,
    node: &NodeName,
    values: BTreeMap<String, String>,
    user: &BTreeMap<String, String>,
    keep: bool,
    warnings: &mut Vec<String>,
) {
    let derived = spec.env.clone();
    for (k, v) in values {
        if user.contains_key(&k) || derived.get(&k) == Some(&v) {
            continue;
        }
        if !owned(&k, &derived) {
            spec.env.insert(k, v);
            continue;
        }
        let show = |v: &str| {
            if is_secret_name(&k) {
                MASK.to_string()
            } else {
                v.to_string()
            }
        };
        let recipe = format!("{k}={}", show(&v));
        let ours = derived.get(&k).map(|old| format!("{k}={}", show(old)));
        match (keep, ours) {
            (true, Some(ours)) => warnings.push(format!(
                "{node}: --recipe-env: the recipe's {recipe} replaces spark-launch's {ours}"
            )),
            (true, None) => warnings.push(format!(
                "{node}: --recipe-env: the recipe's {recipe} is set though spark-launch leaves {k} unset on this node"
            )),
            (false, Some(ours)) => warnings.push(format!(
                "{node}: the recipe's {recipe} is not used: spark-launch's {ours} for this node wins (--recipe-env keeps the recipe's)"
            )),
            (false, None) => warnings.push(format!(
                "{node}: the recipe's {recipe} is not used: spark-launch derives {k} per node and leaves it unset on this one (--recipe-env keeps the recipe's)"
            )),
        }
        if keep {
            spec.env.insert(k, v);
        }
    }
}

/// Puts the mods' files into `spec` (`/workspace/mods/NAME/…`, `run.sh` executable) and
/// makes the container run them, in order, before its command.
pub fn add_mods(mods: &[ModFiles], spec: &mut ContainerSpec) {
    if mods.is_empty() {
        return;
    }
    for m in mods {
        for f in &m.files {
            let mode = if f.path == "run.sh" {
                f.mode | 0o755
            } else {
                f.mode
            };
            spec.files.push(ContainerFile {
                path: format!("{MODS_DIR}/{}/{}", m.name, f.path),
                mode,
                content: FileContent::of(f.bytes.clone()),
            });
        }
    }
    let names: Vec<&str> = mods.iter().map(|m| m.name.as_str()).collect();
    spec.env.insert("SL_MODS".into(), names.join(" "));
    let mut command = vec![
        "sh".to_string(),
        "-c".to_string(),
        MODS_SH.to_string(),
        "spark-launch-mods".to_string(),
    ];
    command.append(&mut spec.command);
    spec.command = command;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::Role;
    use crate::plan::JobName;
    use crate::workload::recipe_env::RecipeEnvValue;

    fn spec() -> ContainerSpec {
        let mut s = ContainerSpec::new(
            &JobName::new("r").unwrap(),
            &NodeName::new("n2").unwrap(),
            Role::Worker,
            "img:1",
        );
        s.env
            .insert("NCCL_SOCKET_IFNAME".into(), "enp1s0f1np1".into());
        s.env.insert("HF_HUB_OFFLINE".into(), "1".into());
        s.command = vec!["vllm".into(), "serve".into(), "/m".into()];
        s
    }

    fn values(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_derived_fabric_value_wins_over_the_recipe_s_with_a_warning_naming_both() {
        let mut s = spec();
        let mut warnings = Vec::new();
        let recipe = values(&[
            ("NCCL_SOCKET_IFNAME", "eth0"),
            ("NCCL_IB_GID_INDEX", "3"),
            ("VLLM_USE_FLASHINFER_MOE_FP4", "1"),
        ]);
        let node = NodeName::new("n2").unwrap();
        merge_env(
            &mut s,
            &node,
            recipe.clone(),
            &BTreeMap::new(),
            false,
            &mut warnings,
        );
        assert_eq!(s.env["NCCL_SOCKET_IFNAME"], "enp1s0f1np1");
        assert!(!s.env.contains_key("NCCL_IB_GID_INDEX"));
        assert_eq!(s.env["VLLM_USE_FLASHINFER_MOE_FP4"], "1");
        assert_eq!(
            warnings,
            [
                "n2: the recipe's NCCL_IB_GID_INDEX=3 is not used: spark-launch derives NCCL_IB_GID_INDEX per node and leaves it unset on this one (--recipe-env keeps the recipe's)",
                "n2: the recipe's NCCL_SOCKET_IFNAME=eth0 is not used: spark-launch's NCCL_SOCKET_IFNAME=enp1s0f1np1 for this node wins (--recipe-env keeps the recipe's)",
            ]
        );
        let mut kept = spec();
        let mut warnings = Vec::new();
        merge_env(
            &mut kept,
            &node,
            recipe,
            &BTreeMap::new(),
            true,
            &mut warnings,
        );
        assert_eq!(kept.env["NCCL_SOCKET_IFNAME"], "eth0");
        assert_eq!(kept.env["NCCL_IB_GID_INDEX"], "3");
        assert!(warnings[1].contains("--recipe-env: the recipe's NCCL_SOCKET_IFNAME=eth0 replaces spark-launch's NCCL_SOCKET_IFNAME=enp1s0f1np1"), "{warnings:?}");
    }

    #[test]
    fn a_variable_the_user_gave_stays_the_user_s() {
        let mut s = spec();
        s.env.insert("NCCL_DEBUG".into(), "WARN".into());
        let user = values(&[("NCCL_DEBUG", "WARN")]);
        let mut warnings = Vec::new();
        merge_env(
            &mut s,
            &NodeName::new("n2").unwrap(),
            values(&[("NCCL_DEBUG", "INFO")]),
            &user,
            false,
            &mut warnings,
        );
        assert_eq!(s.env["NCCL_DEBUG"], "WARN");
        assert!(warnings.is_empty());
    }

    #[test]
    fn mods_land_in_their_folders_and_run_before_the_command() {
        let mut s = spec();
        let m = ModFiles {
            name: "fix-a".into(),
            reference: "mods/fix-a".into(),
            files: vec![
                ModFile {
                    path: "run.sh".into(),
                    mode: 0o644,
                    bytes: b"#!/bin/sh\necho patched\n".to_vec(),
                },
                ModFile {
                    path: "patches/x.diff".into(),
                    mode: 0o644,
                    bytes: b"--- a\n".to_vec(),
                },
            ],
        };
        add_mods(std::slice::from_ref(&m), &mut s);
        let files: Vec<(&str, u32)> = s.files.iter().map(|f| (f.path.as_str(), f.mode)).collect();
        assert_eq!(
            files,
            [
                ("/workspace/mods/fix-a/run.sh", 0o755),
                ("/workspace/mods/fix-a/patches/x.diff", 0o644)
            ]
        );
        assert_eq!(s.env["SL_MODS"], "fix-a");
        assert_eq!(s.command[..2], ["sh", "-c"]);
        assert_eq!(s.command[3..], ["spark-launch-mods", "vllm", "serve", "/m"]);
    }

    #[test]
    fn the_summary_keeps_templates_and_masks_secrets() {
        let mut env = RecipeEnv::default();
        env.0
            .insert("AUTH".into(), RecipeEnvValue::text("Bearer x", true));
        env.0
            .insert("RANK".into(), RecipeEnvValue::text("r", false));
        let part = RecipePart {
            name: "r".into(),
            file: "r.yaml".into(),
            format: RecipeFormat::V2,
            program: vec!["vllm".into(), "serve".into()],
            served_name: None,
            env,
            keep_env: false,
            mods: vec![],
            warnings: vec![],
        };
        let s = part.summary();
        assert_eq!(s.env["AUTH"], "<set>");
        assert_eq!(s.env["RANK"], "r");
    }
}
