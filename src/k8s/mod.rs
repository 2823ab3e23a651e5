//! Kubernetes manifests of a serving plan (`export k8s`): the same group `up` starts, as one
//! LeaderWorkerSet (LWS API `leaderworkerset.x-k8s.io/v1`), for a team whose Sparks joined a
//! Kubernetes cluster.
//!
//! What the plan decided is carried over, never decided again:
//!
//! - one LWS, `size` = the plan's nodes, `RecreateGroupOnPodRestart` (the whole-group restart
//!   the supervisor does), one rank per node (pod anti-affinity), and the ranks pinned to the
//!   plan's nodes by name (the leader to the head): everything the plan derived per node —
//!   interface and HCA names, addresses, the Ray members and MPI hosts a line names — is true
//!   only there;
//! - each node's environment in a ConfigMap (`JOB-env`, one `NODE.env` file per node, keyed by
//!   the node's name), read by the entrypoint from the node the pod landed on (the downward
//!   API's `spec.nodeName` as `NODE_NAME`): never one node's names on another;
//! - the engine's line, with the group's size, the rank and the leader's address written as
//!   `$(LWS_GROUP_SIZE)`, `$(LWS_WORKER_INDEX)`, `$(LWS_LEADER_ADDRESS)` by the engine itself
//!   (`ServingEngine::group_line`), so every worker runs one line;
//! - host networking (with the cluster's DNS, so the leader's name resolves), the plan's added
//!   capabilities (`IPC_LOCK`) and security options (Atlas's `seccomp=unconfined`, as the
//!   `Unconfined` seccomp profile; any other refused by name), the
//!   RDMA shared-device plugin's resource (named by `--rdma-resource`) for `/dev/infiniband`,
//!   GPUs as `nvidia.com/gpu`, `/dev/shm` in memory (the Docker plan shares the host's IPC
//!   namespace instead), the plan's memory cap as the memory limit (and request);
//! - the model from the folder `model pull` staged on each node (hostPath, absolute: `--hf-home`)
//!   or from a PVC the user names (`--pvc`); a Hub commit the plan did not record is read from
//!   the cache's `refs/` file when the rank starts;
//! - the runtime cache (the engine's compiled kernels) from each node's folder (hostPath, made
//!   when missing), or, when the plan names none (planned on snapshots), the pod's own;
//! - readiness that means a token (a probe script in the ConfigMap), a Service for the leader's
//!   API, and every secret (the API key, a TensorRT-LLM job's SSH keys) from a Secret the user
//!   creates (`JOB-secrets`): never in a manifest;
//! - `app.kubernetes.io/managed-by: spark-launch` on everything.
//!
//! What Kubernetes cannot say (ulimits, Docker's named volumes, other devices) is a note or a
//! refusal, each with what to do by hand. Pure: a plan in, file names and texts out.

pub mod script;

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{Value, json};

use crate::model::{CONTAINER_HF_HOME, ModelSource};
use crate::node::{NodeName, Role};
use crate::plan::secret::is_secret_in;
use crate::plan::spec::{FileContent, LABEL_BIND, MountKind};
use crate::plan::{ContainerSpec, Gpus, Launch, StageModel, Step, WaitServing};
use crate::workload::engines::{ApiKeySupport, GroupRefs, MultiNode};
use crate::workload::runtime_cache::CONTAINER_DIR as RUNTIME_CACHE_DIR;
use crate::workload::serve::{Problem, ServePlan};
use script::{CopyIn, ReadyProbe, ResolveAtStart};

/// The resource the RDMA shared-device plugin offers by its example configuration; a cluster
/// that names its pool otherwise says so with `--rdma-resource`.
pub const DEFAULT_RDMA_RESOURCE: &str = "rdma/rdma_shared_device_a";
/// The LeaderWorkerSet API the manifests use.
pub const LWS_API_VERSION: &str = "leaderworkerset.x-k8s.io/v1";
/// The LWS releases whose CRD schema the manifests are checked against (tests/k8s_export.rs),
/// the first being the oldest the manifests ask for.
pub const LWS_CHECKED: &str = "v0.7.0 and v0.10.0";
pub const LWS_OLDEST: &str = "v0.7.0";
/// The references a LeaderWorkerSet fills in (the kubelet expands them in `args`).
pub const LWS_SIZE: &str = "$(LWS_GROUP_SIZE)";
pub const LWS_RANK: &str = "$(LWS_WORKER_INDEX)";
pub const LWS_LEADER: &str = "$(LWS_LEADER_ADDRESS)";
/// The manifests, in the order they are applied (the ConfigMap before the pods that read it);
/// named one by one, because the folder also holds `owned_files`' record, a `.json` file
/// kubectl would take for a manifest.
pub const APPLY_FILES: &str = "-f configmap.yaml -f service.yaml -f leaderworkerset.yaml";
/// Seconds between two readiness probes, and how long one may take.
const PROBE_PERIOD_S: u64 = 10;
const PROBE_TIMEOUT_S: u64 = 30;

/// The group's references as a LeaderWorkerSet gives them.
pub fn lws_refs() -> GroupRefs {
    GroupRefs {
        size: LWS_SIZE.to_string(),
        rank: LWS_RANK.to_string(),
        leader: LWS_LEADER.to_string(),
    }
}

/// What the user asked of the export beyond the plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct K8sOptions {
    /// The RDMA shared-device plugin's resource name.
    pub rdma_resource: String,
    /// A PersistentVolumeClaim holding a Hugging Face cache, instead of each node's folder.
    pub pvc: Option<String>,
    /// What the plan was made from, for the files' headers (`the launch profile smoke-test`).
    pub source: String,
}

/// One file written.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct K8sFile {
    pub name: String,
    pub text: String,
}

/// The manifests and what a reader must know about them.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct K8sExport {
    /// The Kubernetes name of the group (the job's name, lowercase).
    pub name: String,
    pub files: Vec<K8sFile>,
    /// The image, and whether it names a digest (else the tag may move).
    pub image: String,
    pub image_pinned: bool,
    /// The keys the Secret `NAME-secrets` must hold (empty: no Secret needed).
    pub secret_keys: Vec<String>,
    /// What is not carried over, or must be done by hand.
    pub notes: Vec<String>,
}

/// Why no manifests were made: every problem, each with its fix.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct K8sRefusal {
    pub problems: Vec<Problem>,
}

impl std::fmt::Display for K8sRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the plan cannot be written as Kubernetes manifests ({} problem{}):",
            self.problems.len(),
            if self.problems.len() == 1 { "" } else { "s" }
        )?;
        for p in &self.problems {
            write!(f, "\n  - {p}")?;
        }
        Ok(())
    }
}

/// A Kubernetes node name: lowercase letters, digits, `-` and `.` (RFC 1123), as kubelets
/// register nodes.
fn is_k8s_node_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.')
        && name.starts_with(|c: char| c.is_ascii_alphanumeric())
        && name.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// The labels every object carries.
fn labels(name: &str, plan: &ServePlan) -> Value {
    json!({
        "app.kubernetes.io/managed-by": "spark-launch",
        "app.kubernetes.io/name": plan.engine.as_str(),
        "app.kubernetes.io/instance": name,
        (crate::plan::spec::LABEL_JOB): plan.job.job.as_str(),
    })
}

/// What the export knows of one template (the leader's or the workers').
struct Side<'a> {
    role: Role,
    nodes: Vec<&'a NodeName>,
    specs: Vec<&'a ContainerSpec>,
}

/// The Secret's name.
fn secret_name(name: &str) -> String {
    format!("{name}-secrets")
}

/// The mounted-file key of a plain file of the plan: `file-N-NAME`, what a ConfigMap key may
/// hold.
fn file_key(i: usize, path: &str) -> String {
    let base: String = path
        .rsplit('/')
        .next()
        .unwrap_or(path)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("file-{i}-{base}")
}

/// The plain files of the plan (a recipe's mods), each with its ConfigMap key, once per path.
fn plain_files(plan: &ServePlan) -> Vec<(String, &crate::plan::spec::ContainerFile)> {
    let mut out: Vec<(String, &crate::plan::spec::ContainerFile)> = Vec::new();
    for n in &plan.job.nodes {
        if let Launch::Container(c) = &n.launch {
            for f in &c.files {
                if !out.iter().any(|(_, o)| o.path == f.path) {
                    out.push((file_key(out.len(), &f.path), f));
                }
            }
        }
    }
    out
}

/// The manifests of `plan` (see the module docs), or every reason they cannot be made.
pub fn export(plan: &ServePlan, opts: &K8sOptions) -> Result<K8sExport, K8sRefusal> {
    let mut problems: Vec<Problem> = Vec::new();
    let mut notes: Vec<String> = Vec::new();
    let name = plan.job.job.as_str().to_ascii_lowercase();
    let mode: MultiNode = match plan.mode.parse() {
        Ok(m) => m,
        Err(e) => {
            problems.push(Problem::new(e, "plan the job again with this spark-launch"));
            MultiNode::Single
        }
    };

    let (leader, workers) = sides(plan, &mut problems);
    if !problems.is_empty() {
        return Err(K8sRefusal { problems });
    }
    let all_nodes: Vec<String> = plan.job.nodes.iter().map(|n| n.node.to_string()).collect();
    let size = all_nodes.len();

    // The Hub models whose commit the plan does not record: found at start, per node.
    let resolve: Vec<ResolveAtStart> = unresolved(plan);
    for r in &resolve {
        notes.push(format!(
            "the commit of {} is not recorded in the plan (planned without the Hub's answer): each rank reads it from {} in its node's cache when it starts",
            r.model, r.refs_file
        ));
    }

    let files = plain_files(plan);
    for (_, f) in &files {
        if matches!(f.content, FileContent::Digest { .. }) {
            problems.push(Problem::new(
                format!(
                    "{}: the kept plan holds only this file's SHA-256, not its bytes",
                    f.path
                ),
                "export from the recipe or profile instead of the job's name",
            ));
        }
    }
    let files_bytes: usize = files.iter().map(|(_, f)| f.content.len()).sum();
    if files_bytes > 900 * 1024 {
        problems.push(Problem::new(
            format!("the plan's files hold {files_bytes} bytes; a ConfigMap holds at most 1 MiB"),
            "bake the files into the image",
        ));
    }

    let ctx = Ctx {
        plan,
        opts,
        name: &name,
        mode,
        all_nodes: &all_nodes,
        resolve: &resolve,
        files: &files,
    };
    let leader_c = ctx.container(&leader, &mut problems, &mut notes);
    let worker_c = if workers.specs.is_empty() {
        None
    } else {
        Some(ctx.container(&workers, &mut problems, &mut notes))
    };
    if !problems.is_empty() {
        // The leader and the workers may fail alike: each problem once.
        let mut seen = BTreeSet::new();
        problems.retain(|p| seen.insert((p.what.clone(), p.fix.clone())));
        return Err(K8sRefusal { problems });
    }
    let leader_c = leader_c.unwrap_or_default();
    let worker_c = worker_c.flatten();

    // Notes on what Kubernetes does not take from the plan.
    let head = leader.specs[0];
    if head.ulimits.iter().any(|u| u.name == "memlock") {
        notes.push(
            "memlock: Kubernetes sets no ulimits; RDMA needs the container runtime's memlock limit unlimited on every node (containerd's systemd unit sets LimitMEMLOCK=infinity), or NCCL falls back to TCP".to_string(),
        );
    }
    if let Some(bind) = head.labels.get(LABEL_BIND) {
        notes.push(format!(
            "the API listens on {bind} only (--bind): the Service reaches the leader at its node's Kubernetes address; plan with --bind all (and an --api-key) for the Service to answer"
        ));
    }
    let image = head.image.clone();
    let image_pinned = image.contains("@sha256:");
    if !image_pinned {
        notes.push(format!(
            "the image {image} is not pinned by a digest (the plan resolved none): the tag may move; give --image NAME@sha256:… to pin it"
        ));
    }
    if plan.sockets.is_some() {
        notes.push(
            "NCCL runs on TCP sockets (--allow-tcp): no RDMA resource is asked for".to_string(),
        );
    }
    if head
        .mounts
        .iter()
        .any(|m| m.target == RUNTIME_CACHE_DIR && !m.source.starts_with('/'))
    {
        notes.push(format!(
            "the runtime cache ({RUNTIME_CACHE_DIR}) is each pod's own folder (an emptyDir): the plan names no folder of the nodes (planned on snapshots, `~` unresolved), so a pod made again compiles again; planned on live nodes, it is each node's folder"
        ));
    }
    let secret_keys = ctx.secret_keys();

    let mut out = Vec::new();
    let header = format!(
        "Generated by spark-launch from {}: the serving group `spark-launch up` would start, as a LeaderWorkerSet.\nREADME.md beside this file says what the cluster needs, and how to apply it.",
        opts.source
    );
    let lws = ctx.lws(size, leader_c, worker_c, &leader, &workers);
    out.push(K8sFile {
        name: "leaderworkerset.yaml".into(),
        text: yaml_docs(&header, &[lws]),
    });
    out.push(K8sFile {
        name: "configmap.yaml".into(),
        text: yaml_docs(&header, &ctx.configmaps()),
    });
    out.push(K8sFile {
        name: "service.yaml".into(),
        text: yaml_docs(&header, &[ctx.service()]),
    });
    let export = K8sExport {
        name: name.clone(),
        files: out,
        image,
        image_pinned,
        secret_keys,
        notes,
    };
    let readme = readme(plan, opts, &export, &ctx);
    let mut export = export;
    export.files.push(K8sFile {
        name: "README.md".into(),
        text: readme,
    });
    Ok(export)
}

/// The plan's containers by side (the head's, the workers'), with a problem for a host
/// process, a node no Kubernetes node can be named as, or a plan without one head.
fn sides<'a>(plan: &'a ServePlan, problems: &mut Vec<Problem>) -> (Side<'a>, Side<'a>) {
    let mut leader = Side {
        role: Role::Head,
        nodes: Vec::new(),
        specs: Vec::new(),
    };
    let mut workers = Side {
        role: Role::Worker,
        nodes: Vec::new(),
        specs: Vec::new(),
    };
    for n in &plan.job.nodes {
        let Launch::Container(c) = &n.launch else {
            problems.push(Problem::new(
                format!("{}: the plan runs a host process, not a container", n.node),
                "plan it with containers (the default runtime) to run it on Kubernetes",
            ));
            continue;
        };
        let side = if n.role == Role::Head {
            &mut leader
        } else {
            &mut workers
        };
        side.nodes.push(&n.node);
        side.specs.push(c);
        // No script or environment file can carry a NUL byte (the quoting refuses one).
        let words = c
            .env
            .iter()
            .flat_map(|(k, v)| [k, v])
            .chain(&c.command)
            .chain(c.entrypoint.iter().flatten())
            .chain(c.files.iter().map(|f| &f.path))
            .chain(c.secret_files.iter().map(|f| &f.path));
        if let Some(w) = words.into_iter().find(|w| w.contains('\0')) {
            problems.push(Problem::new(
                format!(
                    "{}: `{}` holds a NUL byte, which no script or environment file can carry",
                    n.node,
                    crate::text::printable(w)
                ),
                "remove it from the value",
            ));
        }
        if !is_k8s_node_name(n.node.as_str()) {
            problems.push(Problem::new(
                format!(
                    "node {} cannot be a Kubernetes node's name (lowercase letters, digits, '-' and '.')",
                    n.node
                ),
                "name the node in the cluster file (or --snapshot NAME=DIR) as Kubernetes names it: `kubectl get nodes`",
            ));
        }
    }
    if leader.specs.len() != 1 {
        problems.push(Problem::new(
            format!(
                "the plan has {} head containers; a group has one leader",
                leader.specs.len()
            ),
            "plan the job again",
        ));
    }
    (leader, workers)
}

/// The models of the plan whose commit is not recorded, with the file that holds it inside
/// the containers.
fn unresolved(plan: &ServePlan) -> Vec<ResolveAtStart> {
    let mut out: Vec<ResolveAtStart> = Vec::new();
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
        out.push(ResolveAtStart {
            model: model.to_string(),
            refs_file: format!(
                "{}/refs/{}",
                model.node_dir(CONTAINER_HF_HOME),
                revision.as_str()
            ),
            planned,
        });
    }
    out
}

/// Documents as one YAML file, under a comment header.
fn yaml_docs(header: &str, docs: &[Value]) -> String {
    let mut text = String::new();
    for line in header.lines() {
        text.push_str(&format!("# {line}\n"));
    }
    for (i, d) in docs.iter().enumerate() {
        if i > 0 {
            text.push_str("---\n");
        }
        text.push_str(&yaml_serde::to_string(d).unwrap_or_default());
    }
    text
}

/// What every part of the export reads.
struct Ctx<'a> {
    plan: &'a ServePlan,
    opts: &'a K8sOptions,
    name: &'a str,
    mode: MultiNode,
    all_nodes: &'a [String],
    resolve: &'a [ResolveAtStart],
    files: &'a [(String, &'a crate::plan::spec::ContainerFile)],
}

impl Ctx<'_> {
    fn env_configmap(&self) -> String {
        format!("{}-env", self.name)
    }

    fn files_configmap(&self) -> String {
        format!("{}-files", self.name)
    }

    /// Every secret variable of every container, and every secret file's name: the keys of
    /// the Secret.
    fn secret_keys(&self) -> Vec<String> {
        let mut keys = BTreeSet::new();
        for n in &self.plan.job.nodes {
            if let Launch::Container(c) = &n.launch {
                keys.extend(c.env.keys().filter(|k| is_secret_in(&c.env, k)).cloned());
                keys.extend(c.secret_files.iter().map(|f| base_name(&f.path)));
            }
        }
        keys.into_iter().collect()
    }

    /// The container of one side, or `None` when the side has no node. Problems found are
    /// added to `problems`.
    fn container(
        &self,
        side: &Side<'_>,
        problems: &mut Vec<Problem>,
        notes: &mut Vec<String>,
    ) -> Option<Value> {
        let first = side.specs.first()?;
        let args = self.args(side, first, problems);

        // The Secret's files and the plan's plain files, copied into place at start.
        let mut copies: Vec<CopyIn> = Vec::new();
        for f in &first.secret_files {
            copies.push(CopyIn {
                from: format!("{}/{}", script::SECRET_DIR, base_name(&f.path)),
                to: f.path.clone(),
                mode: f.mode,
            });
        }
        for f in &first.files {
            if let Some((key, _)) = self.files.iter().find(|(_, o)| o.path == f.path) {
                copies.push(CopyIn {
                    from: format!("{}/{key}", script::FILES_DIR),
                    to: f.path.clone(),
                    mode: f.mode,
                });
            }
        }
        let entry =
            script::entrypoint(&self.env_configmap(), self.all_nodes, &copies, self.resolve);
        let command = json!([
            "bash",
            "-c",
            script::kubelet_escape(&entry),
            script::ENTRY_NAME
        ]);

        // The environment: the node's name (its file is read by the entrypoint), every
        // secret from the Secret.
        let mut env = vec![json!({
            "name": "NODE_NAME",
            "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}},
        })];
        let secret_vars: BTreeSet<&String> = side
            .specs
            .iter()
            .flat_map(|s| s.env.keys().filter(|k| is_secret_in(&s.env, k)))
            .collect();
        for k in secret_vars {
            env.push(json!({
                "name": k,
                "valueFrom": {"secretKeyRef": {"name": secret_name(self.name), "key": k}},
            }));
        }

        let limits = self.resources(side, first, problems, notes);
        let mounts = self.mounts(first, problems);
        let security = security_context(first, problems);

        let mut c = json!({
            "name": self.plan.engine.as_str(),
            "image": first.image,
            "command": command,
            "args": args,
            "env": env,
            "resources": {"limits": limits, "requests": limits},
            "securityContext": security,
            "volumeMounts": mounts,
        });
        if security.as_object().is_some_and(|s| s.is_empty())
            && let Some(o) = c.as_object_mut()
        {
            o.remove("securityContext");
        }
        if let Some(w) = &first.workdir
            && let Some(o) = c.as_object_mut()
        {
            o.insert("workingDir".into(), json!(w));
        }
        if side.role == Role::Head
            && let Some(o) = c.as_object_mut()
        {
            o.insert(
                "ports".into(),
                json!([{"name": "api", "containerPort": self.plan.endpoint.port, "protocol": "TCP"}]),
            );
            o.insert(
                "readinessProbe".into(),
                json!({
                    "exec": {"command": ["python3", format!("{}/{}", script::MOUNT_DIR, script::READY_FILE)]},
                    "periodSeconds": PROBE_PERIOD_S,
                    "timeoutSeconds": PROBE_TIMEOUT_S,
                    "failureThreshold": 3,
                }),
            );
        }
        Some(c)
    }

    /// The side's arguments: the engine's one line for every rank of the side (what differs
    /// between them written from the group's references), escaped for the kubelet but for
    /// those references; a problem when the side's containers differ otherwise.
    fn args(
        &self,
        side: &Side<'_>,
        first: &ContainerSpec,
        problems: &mut Vec<Problem>,
    ) -> Vec<Value> {
        let who = side.role.as_str();
        let engine = self.plan.engine.engine();
        let refs = lws_refs();
        // One line for every rank of the side: what differs between them the engine writes
        // from the group's references.
        let lines: Vec<_> = side
            .specs
            .iter()
            .map(|s| engine.group_line(self.mode, side.role, s, &refs))
            .collect();
        if lines.iter().any(|l| *l != lines[0]) {
            problems.push(Problem::new(
                format!("the {who}s' lines differ beyond what the group gives them"),
                "report this plan to spark-launch's maintainers",
            ));
        }
        for (what, same) in [
            ("image", side.specs.iter().all(|s| s.image == first.image)),
            (
                "mounts",
                side.specs.iter().all(|s| s.mounts == first.mounts),
            ),
            (
                "devices",
                side.specs.iter().all(|s| s.devices == first.devices),
            ),
            ("GPUs", side.specs.iter().all(|s| s.gpus == first.gpus)),
            ("files", side.specs.iter().all(|s| s.files == first.files)),
            (
                "secret files",
                side.specs
                    .iter()
                    .all(|s| s.secret_files == first.secret_files),
            ),
            (
                "working folder",
                side.specs.iter().all(|s| s.workdir == first.workdir),
            ),
            (
                "capabilities and security options",
                side.specs
                    .iter()
                    .all(|s| s.cap_add == first.cap_add && s.security_opt == first.security_opt),
            ),
        ] {
            if !same {
                problems.push(Problem::new(
                    format!(
                        "the {who}s' containers differ in their {what}; one template runs them all"
                    ),
                    "give every worker node the same setting (the cluster file's per-node paths)",
                ));
            }
        }
        let line = lines.into_iter().next().unwrap_or_default();
        let keep = [LWS_SIZE, LWS_RANK, LWS_LEADER];
        let mut args: Vec<String> = Vec::new();
        if !line.env.is_empty() {
            args.push("env".to_string());
            args.extend(line.env.iter().map(|(k, v)| format!("{k}={v}")));
        }
        if let Some(e) = &first.entrypoint {
            args.extend(e.iter().cloned());
        }
        args.extend(line.command.iter().cloned());
        let args: Vec<Value> = args
            .iter()
            .map(|a| Value::String(script::kubelet_escape_except(a, &keep)))
            .collect();
        args
    }

    /// The side's resources: GPUs, the RDMA resource for `/dev/infiniband`, the memory cap
    /// (the smallest of its nodes').
    fn resources(
        &self,
        side: &Side<'_>,
        first: &ContainerSpec,
        problems: &mut Vec<Problem>,
        notes: &mut Vec<String>,
    ) -> serde_json::Map<String, Value> {
        let who = side.role.as_str();
        let mut limits = serde_json::Map::new();
        match first.gpus {
            Gpus::None => {}
            Gpus::Count(n) => {
                limits.insert("nvidia.com/gpu".into(), json!(n));
            }
            Gpus::All => {
                let nodes = self.plan.job.nodes.len().max(1) as u32;
                let per = (self.plan.tp * self.plan.pp).div_ceil(nodes).max(1);
                limits.insert("nvidia.com/gpu".into(), json!(per));
            }
        }
        for d in &first.devices {
            if d.container == "/dev/infiniband" {
                limits.insert(self.opts.rdma_resource.clone(), json!(1));
            } else {
                problems.push(Problem::new(
                    format!(
                        "the {who}'s container gets the device {}, which a pod gets only through a device plugin",
                        d.host
                    ),
                    "leave the device out, or add the plugin's resource to the manifest by hand",
                ));
            }
        }
        let caps: Vec<u64> = side
            .nodes
            .iter()
            .filter_map(|n| self.plan.memory.nodes.get(*n).and_then(|m| m.limit_bytes))
            .collect();
        match caps.iter().min() {
            Some(min) if caps.len() == side.nodes.len() => {
                if caps.iter().any(|c| c != min) {
                    notes.push(format!(
                        "the {who}s' memory caps differ by node; their template takes the smallest, {min} bytes"
                    ));
                }
                limits.insert("memory".into(), json!(min.to_string()));
            }
            _ => notes.push(format!(
                "no memory cap for the {who}: the plan has none for {}",
                side.nodes
                    .iter()
                    .map(|n| n.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )),
        }

        limits
    }

    /// The side's mounts: the model's cache, the node's folders, `/dev/shm`, the ConfigMap,
    /// the Secret's and the plain files' folders.
    fn mounts(&self, first: &ContainerSpec, problems: &mut Vec<Problem>) -> Vec<Value> {
        let mut mounts = Vec::new();
        for (i, m) in first.mounts.iter().enumerate() {
            let vol = if m.target == CONTAINER_HF_HOME {
                "hf-cache".to_string()
            } else if m.target == RUNTIME_CACHE_DIR {
                "runtime-cache".to_string()
            } else {
                format!("host-{i}")
            };
            if m.kind == MountKind::Volume {
                problems.push(Problem::new(
                    format!(
                        "the containers mount Docker's named volume {} at {}, which Kubernetes has no counterpart of",
                        m.source, m.target
                    ),
                    "give --nccl-from a folder on every node instead of an image, or build the NCCL into the image",
                ));
                continue;
            }
            // The runtime cache under a home not resolved (a plan made on snapshots) is the
            // pod's own instead (`volumes`), never refused.
            let on_node = (m.target != CONTAINER_HF_HOME || self.opts.pvc.is_none())
                && m.target != RUNTIME_CACHE_DIR;
            if on_node && !m.source.starts_with('/') {
                let fix = if m.target == CONTAINER_HF_HOME {
                    "give --hf-home /home/USER/.cache/huggingface (the cache `model pull` fills on every node, as an absolute path) or --pvc NAME (a claim that holds a Hugging Face cache)"
                } else {
                    "give the folder as an absolute path"
                };
                problems.push(Problem::new(
                        format!(
                            "the containers mount {} from {}, which is not an absolute path: a hostPath names one folder on every node",
                            m.target, m.source
                        ),
                        fix,
                    ));
                continue;
            }
            mounts.push(json!({"name": vol, "mountPath": m.target, "readOnly": m.read_only}));
        }
        mounts.push(json!({"name": "dshm", "mountPath": "/dev/shm"}));
        mounts.push(
            json!({"name": "spark-launch", "mountPath": script::MOUNT_DIR, "readOnly": true}),
        );
        if !first.secret_files.is_empty() {
            mounts.push(
                json!({"name": "job-secrets", "mountPath": script::SECRET_DIR, "readOnly": true}),
            );
        }
        if !first.files.is_empty() {
            mounts.push(
                json!({"name": "job-files", "mountPath": script::FILES_DIR, "readOnly": true}),
            );
        }

        mounts
    }

    /// The volumes of a pod running `spec`'s container.
    fn volumes(&self, spec: &ContainerSpec) -> Vec<Value> {
        let mut vols = Vec::new();
        for (i, m) in spec.mounts.iter().enumerate() {
            if m.kind == MountKind::Volume {
                continue;
            }
            if m.target == CONTAINER_HF_HOME {
                match &self.opts.pvc {
                    Some(claim) => vols.push(json!({
                        "name": "hf-cache",
                        "persistentVolumeClaim": {"claimName": claim},
                    })),
                    None => vols.push(json!({
                        "name": "hf-cache",
                        "hostPath": {"path": m.source, "type": "Directory"},
                    })),
                }
            } else if m.target == RUNTIME_CACHE_DIR {
                // The node's folder, made when missing, when the plan names it; else the
                // pod's own folder, kept while the pod is (a container restarted in it finds
                // its compiled kernels; a pod made again starts cold).
                if m.source.starts_with('/') {
                    vols.push(json!({
                        "name": "runtime-cache",
                        "hostPath": {"path": m.source, "type": "DirectoryOrCreate"},
                    }));
                } else {
                    vols.push(json!({"name": "runtime-cache", "emptyDir": {}}));
                }
            } else {
                vols.push(json!({"name": format!("host-{i}"), "hostPath": {"path": m.source}}));
            }
        }
        vols.push(json!({"name": "dshm", "emptyDir": {"medium": "Memory"}}));
        vols.push(json!({
            "name": "spark-launch",
            "configMap": {"name": self.env_configmap(), "defaultMode": 0o644},
        }));
        if !spec.secret_files.is_empty() {
            let items: Vec<Value> = spec
                .secret_files
                .iter()
                .map(|f| json!({"key": base_name(&f.path), "path": base_name(&f.path)}))
                .collect();
            vols.push(json!({
                "name": "job-secrets",
                "secret": {"secretName": secret_name(self.name), "defaultMode": 0o400, "items": items},
            }));
        }
        if !spec.files.is_empty() {
            vols.push(json!({
                "name": "job-files",
                "configMap": {"name": self.files_configmap(), "defaultMode": 0o444},
            }));
        }
        vols
    }

    /// A pod template for one side, running `container`.
    fn template(&self, side: &Side<'_>, container: Value, component: &str) -> Value {
        let mut labels = labels(self.name, self.plan);
        if let Some(o) = labels.as_object_mut() {
            o.insert("app.kubernetes.io/component".into(), json!(component));
        }
        let nodes: Vec<&str> = side.nodes.iter().map(|n| n.as_str()).collect();
        let volumes = side
            .specs
            .first()
            .map(|s| self.volumes(s))
            .unwrap_or_default();
        json!({
            "metadata": {"labels": labels},
            "spec": {
                "hostNetwork": true,
                // Host networking with the cluster's DNS: the leader's name resolves.
                "dnsPolicy": "ClusterFirstWithHostNet",
                "affinity": {
                    // The plan derived each node's environment: its ranks run there only.
                    "nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                        "nodeSelectorTerms": [{"matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": nodes}
                        ]}]
                    }},
                    // One rank per node.
                    "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                        "labelSelector": {"matchLabels": {"app.kubernetes.io/instance": self.name}},
                        "topologyKey": "kubernetes.io/hostname",
                    }]},
                },
                "containers": [container],
                "volumes": volumes,
            },
        })
    }

    fn lws(
        &self,
        size: usize,
        leader_c: Value,
        worker_c: Option<Value>,
        leader: &Side<'_>,
        workers: &Side<'_>,
    ) -> Value {
        let leader_t = self.template(leader, leader_c.clone(), "leader");
        // A group of one node: its workers' template is never used; LWS still wants one.
        let worker_t = match worker_c {
            Some(c) => self.template(workers, c, "worker"),
            None => self.template(leader, leader_c, "worker"),
        };
        json!({
            "apiVersion": LWS_API_VERSION,
            "kind": "LeaderWorkerSet",
            "metadata": {
                "name": self.name,
                "labels": labels(self.name, self.plan),
                "annotations": {
                    "spark-launch.dev/model": self.plan.model.to_string(),
                    "spark-launch.dev/nodes": self.all_nodes.join(","),
                    "spark-launch.dev/mode": self.mode.as_str(),
                },
            },
            "spec": {
                "replicas": 1,
                // Workers are created with the leader: the ranks wait for each other.
                "startupPolicy": "LeaderCreated",
                "leaderWorkerTemplate": {
                    "size": size,
                    // A rank that restarts restarts its whole group, as the supervisor does.
                    "restartPolicy": "RecreateGroupOnPodRestart",
                    "leaderTemplate": leader_t,
                    "workerTemplate": worker_t,
                },
            },
        })
    }

    /// Each node's environment (secrets left out) and the probe; the plan's plain files.
    fn configmaps(&self) -> Vec<Value> {
        let mut data = serde_json::Map::new();
        for n in &self.plan.job.nodes {
            let Launch::Container(c) = &n.launch else {
                continue;
            };
            let env: BTreeMap<String, String> = c
                .env
                .iter()
                .filter(|(k, _)| !is_secret_in(&c.env, k))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            let header = format!(
                "node {} ({}) of {}: its environment as spark-launch planned it for this node only",
                n.node, n.role, self.plan.job.job
            );
            data.insert(
                format!("{}.env", n.node),
                json!(script::env_file(&header, &env)),
            );
        }
        data.insert(
            script::READY_FILE.into(),
            json!(script::ready_py(&self.probe())),
        );
        let mut out = vec![json!({
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": self.env_configmap(), "labels": labels(self.name, self.plan)},
            "data": data,
        })];
        if !self.files.is_empty() {
            let mut text = serde_json::Map::new();
            let mut binary = serde_json::Map::new();
            for (key, f) in self.files {
                match &f.content {
                    FileContent::Text(t) => {
                        text.insert(key.clone(), json!(t));
                    }
                    FileContent::Base64(b) => {
                        binary.insert(key.clone(), json!(b));
                    }
                    FileContent::Digest { .. } => {}
                }
            }
            let mut cm = json!({
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": self.files_configmap(), "labels": labels(self.name, self.plan)},
            });
            if let Some(o) = cm.as_object_mut() {
                if !text.is_empty() {
                    o.insert("data".into(), Value::Object(text));
                }
                if !binary.is_empty() {
                    o.insert("binaryData".into(), Value::Object(binary));
                }
            }
            out.push(cm);
        }
        out
    }

    /// What the readiness probe asks: the head's own wait, one token.
    fn probe(&self) -> ReadyProbe {
        let url = self
            .plan
            .job
            .steps
            .iter()
            .find_map(|s| match s {
                Step::WaitServing(WaitServing { url, .. }) => Some(url.clone()),
                _ => None,
            })
            .unwrap_or_else(|| format!("http://127.0.0.1:{}", self.plan.endpoint.port));
        let key_var = match self.plan.engine.engine().api_key() {
            ApiKeySupport::Env(v) => Some(v.to_string()),
            ApiKeySupport::Refused { .. } => None,
        };
        ReadyProbe {
            url,
            model: self.plan.served_name.clone(),
            key_var,
            timeout_s: PROBE_TIMEOUT_S - 5,
        }
    }

    /// The leader's API.
    fn service(&self) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": format!("{}-api", self.name), "labels": labels(self.name, self.plan)},
            "spec": {
                "selector": {
                    "app.kubernetes.io/instance": self.name,
                    "app.kubernetes.io/component": "leader",
                },
                "ports": [{
                    "name": "api",
                    "port": self.plan.endpoint.port,
                    "targetPort": self.plan.endpoint.port,
                    "protocol": "TCP",
                }],
            },
        })
    }
}

/// Where the README's `kubectl create secret` reads a key from: the file the API key is kept
/// in (`--api-key auto` or `@FILE`), else a file of that name beside the manifests.
fn secret_source(plan: &ServePlan, key: &str) -> String {
    let kept = match plan.engine.engine().api_key() {
        ApiKeySupport::Env(var) if var == key => plan.api_key.as_ref().and_then(|k| k.file.clone()),
        _ => None,
    };
    let path = kept.unwrap_or_else(|| format!("./{key}"));
    crate::text::shell_word(&path).into_owned()
}

/// The container's `securityContext`: its added capabilities, and Docker's security options
/// as Kubernetes says them (`seccomp=unconfined`, which Atlas's containers run with, is the
/// `Unconfined` seccomp profile); an option with no such field is a problem naming it.
fn security_context(spec: &ContainerSpec, problems: &mut Vec<Problem>) -> Value {
    let mut ctx = serde_json::Map::new();
    if !spec.cap_add.is_empty() {
        ctx.insert("capabilities".into(), json!({"add": spec.cap_add}));
    }
    for opt in &spec.security_opt {
        match opt.as_str() {
            "seccomp=unconfined" | "seccomp:unconfined" => {
                ctx.insert("seccompProfile".into(), json!({"type": "Unconfined"}));
            }
            other => problems.push(Problem::new(
                format!("the container runs with Docker's security option {other}, which this export cannot say in a pod"),
                "leave the option out, or add its securityContext field to the manifest by hand",
            )),
        }
    }
    Value::Object(ctx)
}

fn base_name(path: &str) -> String {
    path.rsplit('/').next().unwrap_or(path).to_string()
}

/// The README beside the manifests: what the cluster needs, the Secret, how to apply and
/// check, what is not carried over.
fn readme(plan: &ServePlan, opts: &K8sOptions, export: &K8sExport, ctx: &Ctx<'_>) -> String {
    let name = &export.name;
    let head = plan
        .job
        .nodes
        .first()
        .map(|n| n.node.to_string())
        .unwrap_or_default();
    let mut s = format!(
        "# {name} on Kubernetes\n\nGenerated by spark-launch from {}: the serving group `spark-launch up` would start \
on {}, as one LeaderWorkerSet (`{LWS_API_VERSION}`, checked against the CRD schema of LWS {LWS_CHECKED}).\n\n",
        opts.source,
        ctx.all_nodes.join(", ")
    );
    s.push_str("## What the cluster needs\n\n");
    s.push_str(&format!(
        "- These nodes, by these Kubernetes names: {} (the leader runs on {head}). Each rank reads its node's own \
environment from the ConfigMap `{}` by its node's name, and runs on no other node.\n",
        ctx.all_nodes.join(", "),
        ctx.env_configmap()
    ));
    s.push_str("- The NVIDIA GPU operator (on GB10, with the driver DGX OS ships: the operator's driver container disabled), so that pods can ask for `nvidia.com/gpu`.\n");
    if plan.sockets.is_none() {
        s.push_str(&format!(
            "- The RDMA shared device plugin, offering `{}` on every node with the fabric's devices (give `--rdma-resource` if your pool is named otherwise).\n",
            opts.rdma_resource
        ));
    }
    s.push_str(&format!(
        "- LeaderWorkerSet installed (release {LWS_OLDEST} or later).\n"
    ));
    match &opts.pvc {
        Some(claim) => s.push_str(&format!(
            "- The PersistentVolumeClaim `{claim}` holding a Hugging Face cache with {} (mounted at {CONTAINER_HF_HOME}).\n",
            plan.model
        )),
        None => s.push_str(&format!(
            "- The model in every node's cache: `spark-launch model pull {}`.\n",
            plan.model
        )),
    }
    if !export.secret_keys.is_empty() {
        s.push_str(&format!(
            "\n## The Secret\n\nSecrets never go in these files: create the Secret `{}` with the keys {} \
from files (never on a command line), e.g.\n\n```\nkubectl create secret generic {} {}\n```\n",
            secret_name(name),
            export
                .secret_keys
                .iter()
                .map(|k| format!("`{k}`"))
                .collect::<Vec<_>>()
                .join(", "),
            secret_name(name),
            export
                .secret_keys
                .iter()
                .map(|k| format!("--from-file={k}={}", secret_source(plan, k)))
                .collect::<Vec<_>>()
                .join(" ")
        ));
        if export
            .secret_keys
            .iter()
            .any(|k| k == crate::workload::job_ssh::ENV_CLIENT_PUBLIC)
        {
            s.push_str(&format!(
                "\nThe ranks reach each other over SSH with keys of this job only: make them with \
`ssh-keygen -q -t ed25519 -N '' -f id_ed25519 && ssh-keygen -q -t ed25519 -N '' -f ssh_host_ed25519_key`, \
then `cp id_ed25519.pub {} && cp ssh_host_ed25519_key.pub {}`.\n",
                crate::workload::job_ssh::ENV_CLIENT_PUBLIC,
                crate::workload::job_ssh::ENV_HOST_PUBLIC
            ));
        }
    }
    s.push_str(&format!(
        "\n## Apply\n\n```\nkubectl apply {APPLY_FILES}\nkubectl get leaderworkerset {name}\nkubectl get pods -l app.kubernetes.io/instance={name} -o wide\n```\n\n\
The leader is ready once it generates a token (its readiness probe, `{}/{}`). Then:\n\n```\nkubectl port-forward service/{name}-api {port}:{port}\ncurl http://127.0.0.1:{port}/v1/models\n```\n\n\
Remove it with `kubectl delete {APPLY_FILES}`. (Not `-f .`: the folder also holds \
spark-launch's record of the files it wrote, which kubectl would read as one more manifest.)\n",
        script::MOUNT_DIR,
        script::READY_FILE,
        port = plan.endpoint.port
    ));
    if !export.notes.is_empty() {
        s.push_str("\n## By hand, or not carried over\n\n");
        for n in &export.notes {
            s.push_str(&format!("- {n}\n"));
        }
    }
    s
}

/// What `export k8s` prints: the files written, the notes.
pub fn summary(export: &K8sExport, written: &[String], readme: &str) -> String {
    let mut out = format!(
        "wrote {}\nnext: read {readme}, then `kubectl apply {APPLY_FILES}` in that folder\n",
        written.join("\n      ")
    );
    if !export.notes.is_empty() {
        out.push_str("\nnotes\n");
        for n in &export.notes {
            out.push_str(&format!("  - {n}\n"));
        }
    }
    out
}
