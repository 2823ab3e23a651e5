//! What a community recipe adds to a serving plan beyond the options every launch takes
//! (`recipe::request` builds it): the recipe's environment, rendered per node and merged
//! under what spark-launch sets itself (the fabric variables derived per node, the staging's
//! `HF_HOME`/`HF_HUB_OFFLINE` win over a recipe's different value, with a warning naming both,
//! unless `--recipe-env`), its `pre_exec` commands (run in every container first, each with
//! `bash -c` as sparkrun runs them, in order, the first that fails stopping the container with
//! the command and the tail of its output named), its mods (their files put into every
//! container before it starts, each `run.sh` run after the `pre_exec` commands and before the
//! engine — sparkrun runs a recipe's mods as `pre_exec` entries after its own — once per
//! container), the commands its command runs before the engine on the head (a llama-cpp
//! recipe's script: in the bash that then becomes the engine, as the runner runs the command
//! whole), the entrypoint it asks for (v2 `executor_config.entrypoint`: cleared or replaced in
//! every container, over the engine's own choice, as sparkrun lets a recipe override its
//! runtime's default), the other models it needs (staged beside the model), the served name
//! it asks for, and its name and warnings for the plan.
//!
//! The engine's own line is the engine's (`engines::split_recipe_args`); nothing here looks
//! at it. Pure: the part and the node in, the container changed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::recipe_env::{RecipeEnv, RecipeNode};
use crate::model::ModelSource;
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

/// The script every container of a recipe with `pre_exec` starts with: its arguments are the
/// count of commands, the commands, then the rest of the container's command. Each command runs
/// with `bash -c` in the container's working folder, in order; its output is kept until it
/// ends, then goes to the container's log after an `ERROR` line when it failed, so that the
/// line a failed start shows first names the command and the last lines it printed. Commands
/// run once per container (a restarted container does not run them again), then the rest.
const PRE_EXEC_SH: &str = r#"set -u
n=$1
shift
if [ -e /tmp/.spark-launch-pre-exec-done ]; then
  echo "spark-launch: pre_exec: already run in this container"
  shift "$n"
  exec "$@"
fi
i=1
while [ "$i" -le "$n" ]; do
  cmd=$1
  shift
  echo "spark-launch: pre_exec[$i] of $n: running"
  out="/tmp/spark-launch-pre-exec-$i.log"
  bash -c "$cmd" >"$out" 2>&1
  rc=$?
  if [ "$rc" != 0 ]; then
    shown=$(printf '%s' "$cmd" | tr '
' ' ' | head -c 120)
    echo "spark-launch: ERROR pre_exec[$i] \`$shown\` failed (exit $rc): $(tail -n 3 "$out" | tr '
' ' ')"
    cat "$out"
    exit 1
  fi
  cat "$out"
  echo "spark-launch: pre_exec[$i] of $n: done"
  i=$((i + 1))
done
touch /tmp/.spark-launch-pre-exec-done
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
    /// Commands run in every container before its mods and its engine (v2 `pre_exec`).
    pub pre_exec: Vec<String>,
    /// Commands the recipe's command runs before the engine's, with the operator that joins
    /// them to it (`if …; fi &&`): run on the head, in the bash that then starts the engine.
    pub before_engine: Option<String>,
    pub mods: Vec<ModFiles>,
    /// Models the engine loads besides the model (a speculative draft the recipe's settings
    /// name, a `distribution_config` entry), staged as the model is, before the start.
    pub models: Vec<RecipeModel>,
    /// v2 `executor_config.entrypoint`: `""` clears the image's entrypoint, a program replaces
    /// it; `None` leaves the container's as the engine planned it.
    pub entrypoint: Option<String>,
    /// An eugr (v1) recipe run solo, as eugr's runner runs it (`solo_only`, or a cluster of
    /// one node): `--ray` is not used, as that runner ignores it in solo mode.
    pub solo: bool,
    /// What the recipe does differently here, said before it runs.
    pub warnings: Vec<String>,
}

/// A model a recipe needs on its nodes besides the one it serves.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecipeModel {
    /// A Hub repo at its revision.
    pub source: ModelSource,
    /// The ranks whose nodes hold it (0: the head); `None`: every node of the job.
    pub ranks: Option<Vec<usize>>,
}

impl RecipeModel {
    /// The nodes of `used` (in rank order) that hold it; ranks past the job's nodes are none.
    pub fn holders(&self, used: &[NodeName]) -> Vec<NodeName> {
        match &self.ranks {
            None => used.to_vec(),
            Some(ranks) => used
                .iter()
                .enumerate()
                .filter(|(i, _)| ranks.contains(i))
                .map(|(_, n)| n.clone())
                .collect(),
        }
    }
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
    /// The `pre_exec` commands, in the order every container runs them, before the mods.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_exec: Vec<String>,
    /// The commands the recipe's command runs before the engine's, on the head, as written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub before_engine: Option<String>,
    /// The mods, in the order they run, each in `/workspace/mods/NAME`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mods: Vec<String>,
    /// `executor_config.entrypoint` as written (`""`: the image's entrypoint cleared); each
    /// container's `entrypoint` shows what runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub entrypoint: Option<String>,
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
            pre_exec: self.pre_exec.clone(),
            before_engine: self.before_engine.clone(),
            mods: self.mods.iter().map(|m| m.name.clone()).collect(),
            entrypoint: self.entrypoint.clone(),
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

/// Gives `spec` the entrypoint a recipe asks for, as Docker's `--entrypoint` takes it: `""`
/// clears the image's (the command runs alone), any other text is the one program run with
/// the command as its arguments; `None` changes nothing.
pub fn set_entrypoint(entrypoint: Option<&str>, spec: &mut ContainerSpec) {
    match entrypoint {
        None => {}
        Some("") => spec.entrypoint = Some(Vec::new()),
        Some(program) => spec.entrypoint = Some(vec![program.to_string()]),
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

/// Makes the container run `before` (the commands a recipe's command runs before its engine,
/// with the operator that joins them to it) and then its command, in one bash, as the runner
/// runs the recipe's command: `bash -c 'BEFORE exec "$@"'` with the command as its arguments,
/// so that the engine is the process the bash becomes when the commands let it start.
pub fn add_before_engine(before: &str, spec: &mut ContainerSpec) {
    let mut command = vec![
        "bash".to_string(),
        "-c".to_string(),
        format!("{before}\nexec \"$@\"\n"),
        "spark-launch-recipe".to_string(),
    ];
    command.append(&mut spec.command);
    spec.command = command;
}

/// Makes the container run `commands` (a recipe's `pre_exec`), in order, before the rest of its
/// command — the mods' script and the engine when [`add_mods`] ran first.
pub fn add_pre_exec(commands: &[String], spec: &mut ContainerSpec) {
    if commands.is_empty() {
        return;
    }
    let mut command = vec![
        "sh".to_string(),
        "-c".to_string(),
        PRE_EXEC_SH.to_string(),
        "spark-launch-pre-exec".to_string(),
        commands.len().to_string(),
    ];
    command.extend(commands.iter().cloned());
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
    fn pre_exec_commands_run_first_then_the_mods_then_the_engine() {
        let mut s = spec();
        let m = ModFiles {
            name: "fix-a".into(),
            reference: "mods/fix-a".into(),
            files: vec![ModFile {
                path: "run.sh".into(),
                mode: 0o755,
                bytes: b"#!/bin/sh\n".to_vec(),
            }],
        };
        add_mods(std::slice::from_ref(&m), &mut s);
        let commands = vec!["pip install x".to_string(), "python3 /opt/p.py".to_string()];
        add_pre_exec(&commands, &mut s);
        assert_eq!(s.command[..2], ["sh", "-c"]);
        assert_eq!(
            s.command[3..7],
            [
                "spark-launch-pre-exec",
                "2",
                "pip install x",
                "python3 /opt/p.py"
            ]
        );
        assert_eq!(s.command[7..9], ["sh", "-c"]);
        assert_eq!(
            s.command[10..],
            ["spark-launch-mods", "vllm", "serve", "/m"]
        );
        let mut none = spec();
        add_pre_exec(&[], &mut none);
        assert_eq!(none.command, ["vllm", "serve", "/m"]);
    }

    /// Runs the wrapper with this machine's `bash`: the recipe's commands first, in the same
    /// shell, then the engine with its words as they were, only when the commands let it start
    /// (`&&`), as bash runs the recipe's whole command.
    #[test]
    fn the_commands_before_the_engine_run_first_in_one_bash_and_can_stop_it() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let run = |before: &str| {
            let mut s = spec();
            s.command = vec![
                "sh".into(),
                "-c".into(),
                format!("echo \"engine $0 $1\" >> {}", log.display()),
                "a b".into(),
                "'c'".into(),
            ];
            add_before_engine(before, &mut s);
            assert_eq!(s.command[..2], ["bash", "-c"]);
            assert_eq!(s.command[3..5], ["spark-launch-recipe", "sh"]);
            std::process::Command::new(&s.command[0])
                .args(&s.command[1..])
                .output()
                .unwrap()
        };
        let fetch = format!(
            "if [ ! -f {d}/x ]; then \\\n  echo fetched >> {l} ; \\\nfi &&",
            d = dir.path().display(),
            l = log.display()
        );
        let out = run(&fetch);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "fetched\nengine a b 'c'\n"
        );
        std::fs::remove_file(&log).unwrap();
        let out = run("false &&");
        assert!(!out.status.success());
        assert!(
            !log.exists(),
            "the engine started after its commands failed"
        );
    }

    /// Runs the script with this machine's `sh` and `bash`, as a container would (its files in a
    /// folder of the test's instead of the container's /tmp): the commands in order, once,
    /// then the rest; a failure stops it naming the command and its output's tail.
    #[test]
    fn the_pre_exec_script_runs_each_command_once_and_a_failure_names_it_with_its_output() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("log");
        let run = |commands: &[&str]| {
            let mut s = spec();
            s.command = vec![
                "sh".into(),
                "-c".into(),
                format!("echo engine >> {}", log.display()),
            ];
            let commands: Vec<String> = commands.iter().map(|c| c.to_string()).collect();
            add_pre_exec(&commands, &mut s);
            s.command[2] = s.command[2].replace("/tmp/", &format!("{}/", dir.path().display()));
            std::process::Command::new(&s.command[0])
                .args(&s.command[1..])
                .current_dir(dir.path())
                .output()
                .unwrap()
        };
        let ok = [
            format!("echo one >> {}", log.display()),
            format!("[[ -n x ]] && echo two >> {}", log.display()),
        ];
        let ok: Vec<&str> = ok.iter().map(String::as_str).collect();
        let out = run(&ok);
        assert!(out.status.success(), "{out:?}");
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "one\ntwo\nengine\n");
        // Started again in the same container: the commands are not run twice.
        let out = run(&ok);
        assert!(out.status.success(), "{out:?}");
        assert!(String::from_utf8_lossy(&out.stdout).contains("already run"));
        assert_eq!(
            std::fs::read_to_string(&log).unwrap(),
            "one\ntwo\nengine\nengine\n"
        );
        std::fs::remove_file(dir.path().join(".spark-launch-pre-exec-done")).unwrap();
        std::fs::remove_file(&log).unwrap();
        let out = run(&[
            "echo fine",
            "echo first; echo 'no module named x' >&2; exit 7",
            "echo never",
        ]);
        assert_eq!(out.status.code(), Some(1));
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(
            crate::workload::readiness::first_error(&text).as_deref(),
            Some(
                "spark-launch: ERROR pre_exec[2] `echo first; echo 'no module named x' >&2; exit 7` failed (exit 7): first no module named x"
            )
        );
        assert!(!text.contains("never"), "{text}");
        assert!(!log.exists(), "the engine started after a failed pre_exec");
    }

    #[test]
    fn a_recipe_s_entrypoint_clears_or_replaces_the_container_s_and_none_keeps_it() {
        let mut s = spec();
        set_entrypoint(None, &mut s);
        assert_eq!(s.entrypoint, None, "the image's own entrypoint stays");
        set_entrypoint(Some(""), &mut s);
        assert_eq!(
            s.entrypoint,
            Some(vec![]),
            "cleared: the command runs alone"
        );
        // One program, as Docker's --entrypoint takes it: never split into words.
        set_entrypoint(Some("/opt/nvidia/nvidia_entrypoint.sh"), &mut s);
        assert_eq!(
            s.entrypoint,
            Some(vec!["/opt/nvidia/nvidia_entrypoint.sh".to_string()])
        );
        assert_eq!(
            s.command,
            ["vllm", "serve", "/m"],
            "the command is untouched"
        );
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
            pre_exec: vec![],
            before_engine: None,
            mods: vec![],
            models: Vec::new(),
            entrypoint: None,
            solo: false,
            warnings: vec![],
        };
        let s = part.summary();
        assert_eq!(s.env["AUTH"], "<set>");
        assert_eq!(s.env["RANK"], "r");
    }
}
