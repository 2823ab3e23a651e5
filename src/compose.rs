//! Compose files: the same `ContainerSpec`s the launcher would start, written as one
//! `docker compose` file per node, for users who prefer to run things by hand.
//!
//! Nothing is lost in translation: image, entrypoint, command, environment, labels, host
//! network and IPC, GPUs (`deploy.resources.reservations.devices`, what `--gpus all` means),
//! devices, capabilities, limits (the memory cap as `mem_limit` and `memswap_limit`, equal)
//! and mounts. Compose interpolates `$VAR` in every string, so
//! every `$` of a command or value is written `$$`; a mount source under `~` becomes
//! `${HOME}/…` (the home of whoever runs compose on that node). A secret (`HF_TOKEN`, `*_KEY`)
//! is written as `${NAME:?...}`: compose reads it from its own environment, the file never
//! holds it. A job's private SSH keys, which the launcher uploads into its containers, are
//! mounted read-only from `job-ssh/` beside the file; the README says how to make them.
//!
//! A Hub model whose commit the plan does not record (a dry run on snapshots with the Hub out
//! of reach) would be named by its branch (`…/snapshots/main`), a folder no Hugging Face cache
//! holds: its snapshot folder is written `…/snapshots/${SL_MODEL_COMMIT:?…}` instead, which
//! compose resolves when it runs, and the README and the output say to set it from the cache's
//! `refs/REVISION` file on each node ([`Unresolved`]).
//!
//! Pure: a plan in, file names and texts out.

use yaml_serde::{Mapping, Sequence, Value};

use crate::model::{CONTAINER_HF_HOME, ModelSource};
use crate::node::{NodeName, Role};
use crate::plan::secret::is_secret_in;
use crate::plan::spec::{IpcMode, NetworkMode};
use crate::plan::{ContainerSpec, Gpus, JobPlan, Launch, StageModel, Step};
use crate::workload::serve::ServePlan;

/// A Hub model of the plan whose commit is not recorded: its snapshot folder is written with a
/// variable compose interpolates at `up` time.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Unresolved {
    /// The model as the plan names it (`ORG/NAME@main`).
    pub model: String,
    /// The folder the plan names inside the containers (`…/snapshots/main`).
    pub planned: String,
    /// The variable that names the commit (`SL_MODEL_COMMIT`, then `SL_MODEL_COMMIT_2`, …).
    pub var: String,
    /// The file on a node that holds the commit once the model is pulled
    /// (`~/.cache/huggingface/hub/models--ORG--NAME/refs/main`).
    pub refs_file: String,
}

impl Unresolved {
    /// The folder as written in the compose files: `…/snapshots/${VAR:?…}`.
    pub fn written(&self) -> String {
        let base = self
            .planned
            .rsplit_once("/snapshots/")
            .map(|(b, _)| b)
            .unwrap_or(&self.planned);
        format!(
            "{}/snapshots/${{{}:?set it to the commit in {} on this node, see README.md}}",
            escape(base),
            self.var,
            escape(&self.refs_file)
        )
    }

    /// The line that sets the variable on a node, to paste before `docker compose up`.
    pub fn export(&self) -> String {
        let file = match self.refs_file.strip_prefix("~/") {
            Some(rest) => format!("\"$HOME\"/{}", crate::text::shell_word(rest)),
            None => crate::text::shell_word(&self.refs_file).into_owned(),
        };
        format!("export {}=\"$(cat {file})\"", self.var)
    }
}

/// The Hub models of the plan (the served one, a speculative draft) whose commit is not
/// recorded, each with its variable. Empty when every commit is known (a live plan resolves
/// them on the Hub before planning).
pub fn unresolved(plan: &ServePlan) -> Vec<Unresolved> {
    let hf_home = plan
        .job
        .nodes
        .first()
        .and_then(|n| match &n.launch {
            Launch::Container(c) => c
                .mounts
                .iter()
                .find(|m| m.target == CONTAINER_HF_HOME)
                .map(|m| m.source.clone()),
            Launch::Process(_) => None,
        })
        .unwrap_or_else(|| "~/.cache/huggingface".to_string());
    let mut out: Vec<Unresolved> = Vec::new();
    for step in &plan.job.steps {
        let Step::StageModel(stage) = step else {
            continue;
        };
        let StageModel { model, .. } = stage.as_ref();
        let ModelSource::Hub {
            revision,
            commit: None,
            ..
        } = model
        else {
            continue;
        };
        let planned = model.container_path();
        if out.iter().any(|u| u.planned == planned) {
            continue;
        }
        let var = match out.len() {
            0 => "SL_MODEL_COMMIT".to_string(),
            n => format!("SL_MODEL_COMMIT_{}", n + 1),
        };
        out.push(Unresolved {
            model: model.to_string(),
            refs_file: format!("{}/refs/{}", model.node_dir(&hf_home), revision.as_str()),
            planned,
            var,
        });
    }
    out
}

/// Every string of `v` with `from` (as escaped for compose) replaced by `to` (written as is).
fn rewrite(v: &mut Value, from: &str, to: &str) {
    match v {
        Value::String(text) if text.contains(from) => *text = text.replace(from, to),
        Value::Sequence(items) => items.iter_mut().for_each(|i| rewrite(i, from, to)),
        Value::Mapping(m) => m.iter_mut().for_each(|(_, i)| rewrite(i, from, to)),
        _ => {}
    }
}

/// One compose file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComposeFile {
    pub node: NodeName,
    pub role: Role,
    /// `NODE.compose.yaml`.
    pub file_name: String,
    pub text: String,
}

fn s(v: &str) -> Value {
    Value::String(v.to_string())
}

/// `$` → `$$`: compose must pass the text through untouched.
pub fn escape(v: &str) -> String {
    v.replace('$', "$$")
}

fn strings(items: &[String]) -> Value {
    Value::Sequence(items.iter().map(|i| s(&escape(i))).collect())
}

fn source(path: &str) -> String {
    match path.strip_prefix("~/") {
        Some(rest) => format!("${{HOME}}/{}", escape(rest)),
        None if path == "~" => "${HOME}".to_string(),
        None => escape(path),
    }
}

/// The compose service of one container.
pub fn service(spec: &ContainerSpec) -> Value {
    let mut m = Mapping::new();
    m.insert(s("container_name"), s(&spec.name));
    m.insert(s("image"), s(&spec.image));
    if let Some(e) = &spec.entrypoint {
        m.insert(s("entrypoint"), strings(e));
    }
    if !spec.command.is_empty() {
        m.insert(s("command"), strings(&spec.command));
    }
    if !spec.env.is_empty() {
        let mut env = Mapping::new();
        for (k, v) in &spec.env {
            // A secret never lands in a generated file: compose takes it from the
            // environment of whoever runs it, and refuses to start without it.
            let v = if is_secret_in(&spec.env, k) {
                format!("${{{k}:?export {k} before docker compose up}}")
            } else {
                escape(v)
            };
            env.insert(s(k), s(&v));
        }
        m.insert(s("environment"), Value::Mapping(env));
    }
    let mut labels = Mapping::new();
    for (k, v) in &spec.labels {
        labels.insert(s(k), s(&escape(v)));
    }
    m.insert(s("labels"), Value::Mapping(labels));
    match spec.network {
        NetworkMode::Host => m.insert(s("network_mode"), s("host")),
        NetworkMode::Bridge => m.insert(s("network_mode"), s("bridge")),
    };
    match spec.ipc {
        IpcMode::Host => m.insert(s("ipc"), s("host")),
        IpcMode::Private => m.insert(s("ipc"), s("private")),
    };
    if !spec.cap_add.is_empty() {
        m.insert(s("cap_add"), strings(&spec.cap_add));
    }
    if !spec.security_opt.is_empty() {
        m.insert(s("security_opt"), strings(&spec.security_opt));
    }
    if !spec.ulimits.is_empty() {
        let mut u = Mapping::new();
        for l in &spec.ulimits {
            let mut lim = Mapping::new();
            lim.insert(s("soft"), Value::Number(l.soft.into()));
            lim.insert(s("hard"), Value::Number(l.hard.into()));
            u.insert(s(&l.name), Value::Mapping(lim));
        }
        m.insert(s("ulimits"), Value::Mapping(u));
    }
    // The launcher's cap: memory and memory-swap equal (no swap beyond it).
    if let Some(limit) = spec.memory_limit {
        m.insert(s("mem_limit"), Value::Number(limit.into()));
        m.insert(s("memswap_limit"), Value::Number(limit.into()));
    }
    if !spec.devices.is_empty() {
        let d: Vec<String> = spec
            .devices
            .iter()
            .map(|d| format!("{}:{}:{}", d.host, d.container, d.permissions))
            .collect();
        m.insert(s("devices"), strings(&d));
    }
    if !spec.mounts.is_empty() || !spec.secret_files.is_empty() {
        let mut vols = Sequence::new();
        for mount in &spec.mounts {
            let mut v = Mapping::new();
            v.insert(
                s("type"),
                s(match mount.kind {
                    crate::plan::spec::MountKind::Bind => "bind",
                    crate::plan::spec::MountKind::Volume => "volume",
                }),
            );
            v.insert(s("source"), s(&source(&mount.source)));
            v.insert(s("target"), s(&escape(&mount.target)));
            v.insert(s("read_only"), Value::Bool(mount.read_only));
            vols.push(Value::Mapping(v));
        }
        // The job's private keys are uploaded into a container spark-launch starts; a compose
        // file cannot carry them, so it mounts them from `job-ssh/` beside itself (the README
        // says how to make them).
        for file in &spec.secret_files {
            let mut v = Mapping::new();
            v.insert(s("type"), s("bind"));
            v.insert(s("source"), s(&escape(&secret_source(&file.path))));
            v.insert(s("target"), s(&escape(&file.path)));
            v.insert(s("read_only"), Value::Bool(true));
            vols.push(Value::Mapping(v));
        }
        m.insert(s("volumes"), Value::Sequence(vols));
    }
    let count = match spec.gpus {
        Gpus::None => None,
        Gpus::All => Some(s("all")),
        Gpus::Count(n) => Some(Value::Number(n.into())),
    };
    if let Some(count) = count {
        let mut dev = Mapping::new();
        dev.insert(s("driver"), s("nvidia"));
        dev.insert(s("count"), count);
        dev.insert(s("capabilities"), Value::Sequence(vec![s("gpu")]));
        let mut reservations = Mapping::new();
        reservations.insert(s("devices"), Value::Sequence(vec![Value::Mapping(dev)]));
        let mut resources = Mapping::new();
        resources.insert(s("reservations"), Value::Mapping(reservations));
        let mut deploy = Mapping::new();
        deploy.insert(s("resources"), Value::Mapping(resources));
        m.insert(s("deploy"), Value::Mapping(deploy));
    }
    if let Some(w) = &spec.workdir {
        m.insert(s("working_dir"), s(&escape(w)));
    }
    // Logs outlive the container, as with the launcher: nothing restarts or removes it.
    m.insert(s("restart"), s("no"));
    Value::Mapping(m)
}

/// Where a compose file finds a secret file the launcher would upload: `./job-ssh/NAME`.
fn secret_source(path: &str) -> String {
    let name = path.rsplit('/').next().unwrap_or(path);
    format!("./{JOB_SSH_FOLDER}/{name}")
}

/// The folder beside the compose files that holds the job's SSH keys.
const JOB_SSH_FOLDER: &str = "job-ssh";

/// One compose file per node of the plan (containers only; host processes have none); the
/// snapshot folders of `unresolved` models written with their variables.
pub fn files(plan: &JobPlan, header: &str, unresolved: &[Unresolved]) -> Vec<ComposeFile> {
    plan.nodes
        .iter()
        .filter_map(|n| {
            let Launch::Container(spec) = &n.launch else {
                return None;
            };
            let mut svc = service(spec);
            for u in unresolved {
                rewrite(&mut svc, &escape(&u.planned), &u.written());
            }
            let mut services = Mapping::new();
            services.insert(s(plan.workload.as_str()), svc);
            let mut root = Mapping::new();
            root.insert(s("name"), s(&spec.name));
            root.insert(s("services"), Value::Mapping(services));
            // Named volumes (`--nccl-from IMAGE`) are filled beforehand: external to compose.
            let mut named = Mapping::new();
            for m in spec
                .mounts
                .iter()
                .filter(|m| m.kind == crate::plan::spec::MountKind::Volume)
            {
                let mut v = Mapping::new();
                v.insert(s("external"), Value::Bool(true));
                named.insert(s(&m.source), Value::Mapping(v));
            }
            if !named.is_empty() {
                root.insert(s("volumes"), Value::Mapping(named));
            }
            let body = yaml_serde::to_string(&Value::Mapping(root)).unwrap_or_default();
            let mut text = String::new();
            for line in header.lines() {
                text.push_str(&format!("# {line}\n").replace("# \n", "#\n"));
            }
            text.push_str(&format!(
                "# node {} ({}): run on that node with `docker compose -f {}.compose.yaml up -d`\n",
                n.node, n.role, n.node
            ));
            text.push_str(&body);
            Some(ComposeFile {
                node: n.node.clone(),
                role: n.role,
                file_name: format!("{}.compose.yaml", n.node),
                text,
            })
        })
        .collect()
}

/// Whether any container of the plan expects the job's SSH keys (multi-node TensorRT-LLM).
fn needs_job_ssh(plan: &ServePlan) -> bool {
    plan.job
        .nodes
        .iter()
        .any(|n| matches!(&n.launch, Launch::Container(c) if !c.secret_files.is_empty()))
}

/// Why the commit of each `unresolved` model is not in the files, and how to set it: for the
/// README and the command's output.
pub fn unresolved_text(unresolved: &[Unresolved]) -> String {
    unresolved
        .iter()
        .map(|u| {
            format!(
                "the commit of {} is not recorded (the plan was made without the Hub's answer), so its folder is written `…/snapshots/${{{}}}`, which compose fills when it runs: on each node, once the model is pulled, `{}` before `docker compose up`\n",
                u.model,
                u.var,
                u.export()
            )
        })
        .collect()
}

/// What `compose` prints: the files written, the plan's notes and warnings (as `up --dry-run`
/// shows them) and the unresolved commits.
pub fn summary(plan: &ServePlan, written: &[String], readme: &str) -> String {
    let mut out = format!(
        "wrote {}\nnext: read {readme} for the order to run them in\n",
        written.join("\n      ")
    );
    // Derive's warnings go to stderr as `up --dry-run` shows them (the caller's reporter).
    let mut notes: Vec<String> = plan.notes.clone();
    if let Some(n) = &plan.nccl {
        notes.extend(n.warnings.iter().cloned());
    }
    if !notes.is_empty() {
        out.push_str("\nnotes\n");
        for n in &notes {
            out.push_str(&format!("  - {n}\n"));
        }
    }
    let u = unresolved_text(&unresolved(plan));
    if !u.is_empty() {
        out.push('\n');
        out.push_str(&u);
    }
    out
}

/// The README beside the compose files: what to do around `docker compose up`, in the plan's
/// order, each step with how to do it by hand.
pub fn readme(plan: &ServePlan, profile: &str) -> String {
    use crate::plan::{EnsureFolders, EnsureImage, StageNccl, Start, WaitServing};
    let mut s = format!(
        "# {profile}: compose files\n\nOne file per node, with the containers `spark-launch up {profile}` starts. \
The steps spark-launch would run, in order, and how to do each by hand:\n\n"
    );
    let u = unresolved_text(&unresolved(plan));
    if !u.is_empty() {
        s.push_str(&format!("Before you start: {u}\n"));
    }
    for (i, step) in plan.job.steps.iter().enumerate() {
        let how = match step {
            Step::StageModel(stage) if stage.copy => format!(
                "`spark-launch model pull {}` (or have the same files in every node's Hugging Face cache)",
                stage.model
            ),
            Step::EnsureImage(EnsureImage { image, .. }) => {
                // Paste-ready commands: every foreign word quoted where a shell would not take
                // it as one word (the image is also checked when the profile is read).
                let image = crate::text::shell_word(image);
                format!("`docker pull {image}` on every node, or `spark-launch image push {image}`")
            }
            Step::Start(Start { nodes }) if needs_job_ssh(plan) => format!(
                "the containers reach each other over SSH with keys of this job only: once, here, \
`mkdir -m 700 {d} && ssh-keygen -q -t ed25519 -N '' -f {d}/id_ed25519 && ssh-keygen -q -t ed25519 -N '' -f {d}/ssh_host_ed25519_key`; \
copy `{d}/` beside every node's compose file with the `.pub` files (of the private keys the head needs both, the others only `ssh_host_ed25519_key`; keep them 0600); \
on each node `export {c}=\"$(cat {d}/id_ed25519.pub)\" {h}=\"$(cat {d}/ssh_host_ed25519_key.pub)\"`, \
then `docker compose -f NODE.compose.yaml up -d` ({})",
                nodes
                    .iter()
                    .map(|n| format!("{n}.compose.yaml"))
                    .collect::<Vec<_>>()
                    .join(", "),
                d = JOB_SSH_FOLDER,
                c = crate::workload::job_ssh::ENV_CLIENT_PUBLIC,
                h = crate::workload::job_ssh::ENV_HOST_PUBLIC,
            ),
            Step::Start(Start { nodes }) => format!(
                "on each node: `docker compose -f NODE.compose.yaml up -d` ({})",
                nodes
                    .iter()
                    .map(|n| format!("{n}.compose.yaml"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            // Made by hand as the user who runs compose: a bind mount's missing source would be
            // made by Docker, as root.
            Step::EnsureFolders(EnsureFolders { folders, .. }) => format!(
                "on each node, as the user who runs compose: {}",
                folders
                    .iter()
                    .map(|(node, dir)| {
                        let dir = match dir.strip_prefix("~/") {
                            Some(rest) => format!("\"$HOME\"/{}", crate::text::shell_word(rest)),
                            None => crate::text::shell_word(dir).into_owned(),
                        };
                        format!("{node}: `mkdir -p {dir}`")
                    })
                    .collect::<Vec<_>>()
                    .join("; ")
            ),
            Step::StageNccl(StageNccl { image, volume, .. }) => format!(
                "on each node: `docker volume create {volume}`, then copy the libnccl.so.2 that {image}'s loader finds (in `nccl-build` images /opt/nccl/lib/libnccl.so.2) into it: `docker run --rm -v {volume}:/sl-nccl --entrypoint cp {image} -L /opt/nccl/lib/libnccl.so.2 /sl-nccl/libnccl.so.2`"
            ),
            Step::CheckNccl(_) => "on each node: `docker run --rm --entrypoint sh IMAGE -c 'echo $LD_LIBRARY_PATH; ldconfig -p | grep libnccl'` shows where the loader looks; `grep -a -o -m1 'NCCL version [0-9.]*' FILE` the release each file holds".to_string(),
            Step::WaitServing(WaitServing { url, .. }) => format!(
                "on the head: `docker logs -f {}` until `curl {}/health` answers",
                crate::text::shell_word(&plan.job.job.container_name(&plan.nodes[0])),
                crate::text::shell_word(url)
            ),
            _ => String::new(),
        };
        s.push_str(&format!("{}. {}", i + 1, step.describe()));
        if !how.is_empty() {
            s.push_str(&format!("\n   — {how}"));
        }
        s.push('\n');
    }
    s.push_str(&format!(
        "\nOnce ready: `curl {}/models`. Stop: `docker compose -f NODE.compose.yaml down` on each node.\n",
        crate::text::shell_word(&plan.endpoint.url)
    ));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::JobName;

    #[test]
    fn dollars_are_doubled_and_home_becomes_an_interpolation() {
        assert_eq!(escape("exec \"$@\""), "exec \"$$@\"");
        assert_eq!(source("~/.cache/huggingface"), "${HOME}/.cache/huggingface");
        assert_eq!(source("/data/$x"), "/data/$$x");
    }

    #[test]
    fn a_gpu_container_keeps_every_setting_in_its_service() {
        let job = JobName::new("demo").unwrap();
        let node = NodeName::new("spark").unwrap();
        let mut spec = ContainerSpec::gpu(&job, &node, Role::Head, "img:1", true);
        spec.command = vec!["bash".into(), "-c".into(), "echo $HOME".into()];
        spec.env.insert("A".into(), "1".into());
        let v = service(&spec);
        assert_eq!(v["network_mode"], "host");
        assert_eq!(v["ipc"], "host");
        assert_eq!(v["command"][2], "echo $$HOME");
        assert_eq!(v["ulimits"]["memlock"]["soft"], -1);
        assert_eq!(v["devices"][0], "/dev/infiniband:/dev/infiniband:rwm");
        assert_eq!(
            v["deploy"]["resources"]["reservations"]["devices"][0]["count"],
            "all"
        );
        assert_eq!(v["labels"]["dev.spark-launch.job"], "demo");
        assert!(v.get("mem_limit").is_none());
        spec.memory_limit = Some(121_385_703_424);
        let v = service(&spec);
        assert_eq!(v["mem_limit"], 121_385_703_424u64);
        assert_eq!(v["memswap_limit"], 121_385_703_424u64);
    }

    #[test]
    fn a_secret_is_read_from_the_environment_of_compose_never_written() {
        let job = JobName::new("demo").unwrap();
        let node = NodeName::new("spark").unwrap();
        let mut spec = ContainerSpec::gpu(&job, &node, Role::Head, "img:1", true);
        spec.env.insert("HF_TOKEN".into(), "hf_secret".into());
        let v = service(&spec);
        assert_eq!(
            v["environment"]["HF_TOKEN"],
            "${HF_TOKEN:?export HF_TOKEN before docker compose up}"
        );
        assert!(!yaml_serde::to_string(&v).unwrap().contains("hf_secret"));
    }
}
