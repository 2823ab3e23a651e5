//! `ContainerSpec`: one container on one node, as plain data. The runtime turns it into the
//! exact Docker create request; `--dry-run --json` prints it; compose files serialise it.
//!
//! Every spec carries spark-launch's labels (`dev.spark-launch.job`, `.node`, `.role`) and a
//! deterministic name (`sl-<job>-<node>`): the constructor sets them, so no container we start
//! can be anonymous, and `status`/`logs`/`stop` find work by label alone.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::CONTAINER_HF_HOME;
use crate::node::{NodeName, Role};

pub const LABEL_JOB: &str = "dev.spark-launch.job";
pub const LABEL_NODE: &str = "dev.spark-launch.node";
pub const LABEL_ROLE: &str = "dev.spark-launch.role";
/// What a serving job runs: its engine's name (`status` reads what its logs say by it).
pub const LABEL_WORKLOAD: &str = "dev.spark-launch.workload";
/// The TCP ports the job serves on the node (host network), comma-separated, for `status`.
pub const LABEL_PORTS: &str = "dev.spark-launch.ports";
/// The folder on the node where a serving rank's engine keeps what it compiles at start, as the
/// plan named it (`workload::runtime_cache`), for `status`.
pub const LABEL_RUNTIME_CACHE: &str = "dev.spark-launch.runtime-cache";
/// The one address a serving head's API listens on (`--bind ADDR|fabric`), for `bench JOB`;
/// absent when it listens on every interface.
pub const LABEL_BIND: &str = "dev.spark-launch.bind";

/// The name of a job: a set of containers or processes on several nodes.
/// Read from a file (a kept plan) by the same rule as when given: a name that breaks it is an
/// error there, never a container name made of it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct JobName(String);

impl From<JobName> for String {
    fn from(j: JobName) -> String {
        j.0
    }
}

impl TryFrom<String> for JobName {
    type Error = InvalidJobName;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        JobName::new(s)
    }
}

impl JobName {
    /// Letters, digits and `-`, starting with a letter, at most 40 characters (it becomes part
    /// of container names, which Docker limits to `[a-zA-Z0-9][a-zA-Z0-9_.-]+`).
    pub fn new(name: impl Into<String>) -> Result<Self, InvalidJobName> {
        let name = name.into();
        let ok = !name.is_empty()
            && name.len() <= 40
            && name.starts_with(|c: char| c.is_ascii_alphabetic())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
        if ok {
            Ok(JobName(name))
        } else {
            Err(InvalidJobName(name))
        }
    }

    /// A valid job name made of `text`: letters and digits lowercased, every other run of
    /// characters one `-`, `prefix` put first when the result would not start with a letter,
    /// cut to 40 characters; `serve` when nothing is left.
    pub fn slug(text: &str, prefix: &str) -> Self {
        let mut slug = String::new();
        for c in text.chars() {
            if c.is_ascii_alphanumeric() {
                slug.push(c.to_ascii_lowercase());
            } else if !slug.is_empty() && !slug.ends_with('-') {
                slug.push('-');
            }
        }
        let mut job = if slug.starts_with(|c: char| c.is_ascii_alphabetic()) {
            slug
        } else {
            format!("{prefix}{slug}")
        };
        job.truncate(40);
        JobName::new(job.trim_end_matches('-')).unwrap_or_else(|_| JobName::serve())
    }

    /// `vllm-qwen2-5-0-5b-instruct`: a serving job named by its engine and its model's last
    /// path part.
    pub fn of_model(engine: &str, model: &crate::model::ModelSource) -> Self {
        let name = model.served_name();
        let base = name.rsplit('/').next().unwrap_or(&name);
        JobName::slug(&format!("{engine}-{base}"), "")
    }

    /// `serve`: a job name for a serving job when nothing better can be made.
    pub fn serve() -> Self {
        JobName("serve".to_string())
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The container (or process) name of this job on `node`: `sl-<job>-<node>`.
    pub fn container_name(&self, node: &NodeName) -> String {
        format!("sl-{}-{}", self.0, node)
    }
}

impl fmt::Display for JobName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::str::FromStr for JobName {
    type Err = InvalidJobName;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        JobName::new(s)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error(
    "invalid job name {0:?}: use letters, digits and '-', starting with a letter, at most 40 characters"
)]
pub struct InvalidJobName(pub String);

/// Checks an image reference (`nvcr.io/nvidia/vllm:26.04-py3`, `img@sha256:…`): the
/// characters Docker's reference grammar uses (letters, digits, `. _ - / : @ +`), at most 255,
/// not starting with `-`. Anything else (`img; touch x`) would reach shell commands and
/// generated files as something other than an image name.
pub fn check_image(image: &str) -> Result<(), String> {
    let ok = !image.is_empty()
        && image.len() <= 255
        && !image.starts_with(['-', '.', '/', ':', '@'])
        && image.chars().all(|c| {
            c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '/' | ':' | '@' | '+')
        });
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{:?} is not an image reference (e.g. nvcr.io/nvidia/vllm:26.04-py3): letters, digits and . _ - / : @ only",
            crate::text::printable(image)
        ))
    }
}

/// A mount into the container: a folder of the node (bind) or a named volume of its engine.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Mount {
    /// A path on the node, or the volume's name.
    pub source: String,
    pub target: String,
    #[serde(default)]
    pub read_only: bool,
    #[serde(default, skip_serializing_if = "MountKind::is_bind")]
    pub kind: MountKind,
}

/// What a mount's source is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MountKind {
    /// A folder (or file) of the node.
    #[default]
    Bind,
    /// A named volume of the node's engine (`--nccl-from IMAGE` fills one).
    Volume,
}

impl MountKind {
    pub fn is_bind(&self) -> bool {
        *self == MountKind::Bind
    }
}

impl std::str::FromStr for Mount {
    type Err = String;
    /// `SRC:DST` or `SRC:DST:ro`, as `docker run -v` takes it.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.split(':').collect();
        let (source, target, read_only) = match parts.as_slice() {
            [s, t] => (*s, *t, false),
            [s, t, "ro"] => (*s, *t, true),
            _ => return Err(format!("expected SRC:DST or SRC:DST:ro, got {s:?}")),
        };
        if source.is_empty() || target.is_empty() {
            return Err(format!("expected SRC:DST or SRC:DST:ro, got {s:?}"));
        }
        Ok(Mount {
            source: source.to_string(),
            target: target.to_string(),
            read_only,
            kind: MountKind::Bind,
        })
    }
}

/// `KEY=VALUE`: one variable of a job's environment (`--env`, `-e`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EnvVar {
    pub key: String,
    pub value: String,
}

impl std::str::FromStr for EnvVar {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (k, v) = s
            .split_once('=')
            .ok_or_else(|| format!("expected KEY=VALUE (e.g. NCCL_DEBUG=INFO), got {s:?}"))?;
        let ok = k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(format!("{k:?} is not a variable name"));
        }
        Ok(EnvVar {
            key: k.to_string(),
            value: v.to_string(),
        })
    }
}

/// A device node passed into the container (`/dev/infiniband` for RDMA).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Device {
    pub host: String,
    pub container: String,
    /// cgroup permissions, `rwm`.
    pub permissions: String,
}

/// Which GPUs the container gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Gpus {
    None,
    #[default]
    All,
    Count(u32),
}

impl fmt::Display for Gpus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Gpus::None => f.write_str("none"),
            Gpus::All => f.write_str("all"),
            Gpus::Count(n) => write!(f, "{n}"),
        }
    }
}

impl Gpus {
    pub fn wanted(self) -> bool {
        !matches!(self, Gpus::None | Gpus::Count(0))
    }
}

impl std::str::FromStr for Gpus {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "none" | "0" => Ok(Gpus::None),
            "all" => Ok(Gpus::All),
            n => n
                .parse::<u32>()
                .map(Gpus::Count)
                .map_err(|_| format!("expected none, all or a number of GPUs, got {s:?}")),
        }
    }
}

/// A resource limit (`docker run --ulimit name=soft:hard`); -1 means unlimited.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ulimit {
    pub name: String,
    pub soft: i64,
    pub hard: i64,
}

impl Ulimit {
    pub fn new(name: &str, soft: i64, hard: i64) -> Self {
        Ulimit {
            name: name.to_string(),
            soft,
            hard,
        }
    }
}

impl std::str::FromStr for Ulimit {
    type Err = String;
    /// `name=soft[:hard]`, as `docker run --ulimit` takes it.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let bad = || {
            format!("expected NAME=SOFT[:HARD] (e.g. memlock=-1 or nofile=65536:65536), got {s:?}")
        };
        let (name, limits) = s.split_once('=').ok_or_else(bad)?;
        let (soft, hard) = match limits.split_once(':') {
            Some((a, b)) => (a, b),
            None => (limits, limits),
        };
        let soft: i64 = soft.parse().map_err(|_| bad())?;
        let hard: i64 = hard.parse().map_err(|_| bad())?;
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_lowercase()) {
            return Err(bad());
        }
        if soft < -1 || hard < -1 {
            return Err(format!(
                "--ulimit {s}: a limit is a number of 0 or more, or -1 for unlimited"
            ));
        }
        // -1 is unlimited: a soft limit may never exceed the hard one.
        let above = |a: i64, b: i64| b != -1 && (a == -1 || a > b);
        if above(soft, hard) {
            return Err(format!(
                "--ulimit {s}: the soft limit ({soft}) is above the hard limit ({hard}); give SOFT ≤ HARD, e.g. {name}={hard}:{hard}",
                soft = if soft == -1 {
                    "unlimited".to_string()
                } else {
                    soft.to_string()
                },
            ));
        }
        Ok(Ulimit::new(name, soft, hard))
    }
}

/// `memlock=-1`: RDMA registers GPU and host memory; a limit makes `ibv_reg_mr` fail and NCCL
/// silently fall back to TCP.
pub const ULIMIT_MEMLOCK: i64 = -1;
/// `stack=64 MiB`, as NVIDIA's containers are run.
pub const ULIMIT_STACK: i64 = 67_108_864;
/// An explicit `nofile`, so the container does not inherit whatever dockerd has.
pub const ULIMIT_NOFILE: i64 = 65_536;

/// How the container joins the node's network.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum NetworkMode {
    /// The node's own interfaces: what NCCL, Ray and MPI need.
    Host,
    /// The engine's default bridge (only for containers that need no fabric).
    Bridge,
}

/// IPC namespace.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum IpcMode {
    /// The node's IPC namespace: NCCL's shared memory transport and large `/dev/shm`.
    Host,
    Private,
}

/// One container on one node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerSpec {
    /// `sl-<job>-<node>`.
    pub name: String,
    pub image: String,
    /// Overrides the image's entrypoint when set.
    pub entrypoint: Option<Vec<String>>,
    /// The command (arguments to the entrypoint).
    pub command: Vec<String>,
    /// Printed with secrets' values as `<set>` (`secret`); the runtime gets the values.
    #[serde(serialize_with = "super::secret::serialize_env")]
    pub env: BTreeMap<String, String>,
    pub labels: BTreeMap<String, String>,
    pub mounts: Vec<Mount>,
    pub devices: Vec<Device>,
    pub gpus: Gpus,
    pub network: NetworkMode,
    pub ipc: IpcMode,
    pub cap_add: Vec<String>,
    /// Docker's `--security-opt` values (`seccomp=unconfined` for Atlas's io_uring).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub security_opt: Vec<String>,
    pub ulimits: Vec<Ulimit>,
    pub workdir: Option<String>,
    /// TCP ports the container serves on the node's network (shown by `status`; with host
    /// networking nothing is published, the container simply listens on the node).
    #[serde(default)]
    pub ports: Vec<u16>,
    /// The cgroup memory limit in bytes, swap included (Docker's memory and memory-swap set
    /// equal): an engine that allocates past it is killed inside its container, the node
    /// stays reachable. `None`: no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_limit: Option<u64>,
    /// Files the runtime puts into the created container before it starts (the engine's
    /// archive upload): secrets that must reach neither the create body, nor argv, nor the
    /// environment (a job's SSH private keys). Printed with their contents as `<set>`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub secret_files: Vec<SecretFile>,
    /// Plain files the runtime puts into the created container before it starts, in the same
    /// upload (a recipe's mods, `/workspace/mods/NAME/…`). Printed with their contents.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files: Vec<ContainerFile>,
}

/// A file put into a container between create and start; gone with the container.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContainerFile {
    /// An absolute path inside the container (parent folders are created).
    pub path: String,
    /// The file's permission bits (owned by root).
    pub mode: u32,
    pub content: FileContent,
}

/// A file's bytes as a plan carries them: UTF-8 text as it is (what a reader of the plan
/// wants to see), anything else as base64; in a plan kept after the launch, only the file's
/// SHA-256 and size (the kept plan never holds a file's bytes: a restart starts the same
/// containers, with the files already in them).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum FileContent {
    Text(String),
    Base64(String),
    Digest { sha256: String, size: usize },
}

impl FileContent {
    /// Text when `bytes` are UTF-8, else base64.
    pub fn of(bytes: Vec<u8>) -> FileContent {
        use base64::Engine as _;
        match String::from_utf8(bytes) {
            Ok(text) => FileContent::Text(text),
            Err(e) => FileContent::Base64(
                base64::engine::general_purpose::STANDARD.encode(e.into_bytes()),
            ),
        }
    }

    /// The bytes; a base64 text that does not decode, or a digest alone, is an error naming
    /// why.
    pub fn bytes(&self) -> Result<Vec<u8>, String> {
        use base64::Engine as _;
        match self {
            FileContent::Text(t) => Ok(t.as_bytes().to_vec()),
            FileContent::Base64(b) => base64::engine::general_purpose::STANDARD
                .decode(b)
                .map_err(|e| format!("not base64: {e}")),
            FileContent::Digest { .. } => Err(
                "the plan keeps only the file's SHA-256, not its bytes; launch the job again"
                    .into(),
            ),
        }
    }

    /// The same file as a kept plan holds it: its SHA-256 and size.
    pub fn digest(&self) -> FileContent {
        match self {
            FileContent::Digest { .. } => self.clone(),
            _ => {
                let bytes = self.bytes().unwrap_or_default();
                FileContent::Digest {
                    sha256: crate::digest::sha256_hex(&bytes),
                    size: bytes.len(),
                }
            }
        }
    }

    /// The size in bytes.
    pub fn len(&self) -> usize {
        match self {
            FileContent::Text(t) => t.len(),
            FileContent::Base64(b) => {
                (b.len() / 4 * 3).saturating_sub(b.bytes().rev().take_while(|c| *c == b'=').count())
            }
            FileContent::Digest { size, .. } => *size,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A file with secret contents, put into a container between create and start; gone with the
/// container. Plans print its contents as `<set>`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SecretFile {
    /// An absolute path inside the container (parent folders are created).
    pub path: String,
    /// The file's permission bits (`0o600` for a private key; owned by root).
    pub mode: u32,
    pub content: super::secret::Secret,
}

impl ContainerSpec {
    /// A bare spec for `job` on `node`: name and labels set, nothing else. Host network and
    /// IPC, no GPUs, no mounts.
    pub fn new(job: &JobName, node: &NodeName, role: Role, image: &str) -> Self {
        let mut labels = BTreeMap::new();
        labels.insert(LABEL_JOB.to_string(), job.to_string());
        labels.insert(LABEL_NODE.to_string(), node.to_string());
        labels.insert(LABEL_ROLE.to_string(), role.to_string());
        ContainerSpec {
            name: job.container_name(node),
            image: image.to_string(),
            entrypoint: None,
            command: Vec::new(),
            env: BTreeMap::new(),
            labels,
            mounts: Vec::new(),
            devices: Vec::new(),
            gpus: Gpus::None,
            network: NetworkMode::Host,
            ipc: IpcMode::Host,
            cap_add: Vec::new(),
            security_opt: Vec::new(),
            ulimits: Vec::new(),
            workdir: None,
            ports: Vec::new(),
            memory_limit: None,
            secret_files: Vec::new(),
            files: Vec::new(),
        }
    }

    /// A GPU container as RDMA workloads need it: all GPUs, host network and IPC, IPC_LOCK,
    /// memlock unlimited, a 64 MiB stack, an explicit nofile, and `/dev/infiniband` when the
    /// node has it.
    pub fn gpu(
        job: &JobName,
        node: &NodeName,
        role: Role,
        image: &str,
        has_infiniband: bool,
    ) -> Self {
        let mut spec = ContainerSpec::new(job, node, role, image);
        spec.gpus = Gpus::All;
        spec.cap_add.push("IPC_LOCK".to_string());
        spec.ulimits = vec![
            Ulimit::new("memlock", ULIMIT_MEMLOCK, ULIMIT_MEMLOCK),
            Ulimit::new("stack", ULIMIT_STACK, ULIMIT_STACK),
            Ulimit::new("nofile", ULIMIT_NOFILE, ULIMIT_NOFILE),
        ];
        if has_infiniband {
            spec.devices.push(Device {
                host: "/dev/infiniband".to_string(),
                container: "/dev/infiniband".to_string(),
                permissions: "rwm".to_string(),
            });
        }
        spec
    }

    /// Mounts the node's Hugging Face cache (`host_dir`, e.g. `/home/me/.cache/huggingface`)
    /// where the container's tools look for it, so weights are read from the node, not fetched.
    pub fn mount_hf_cache(&mut self, host_dir: &str) {
        self.mounts.retain(|m| m.target != CONTAINER_HF_HOME);
        self.mounts.push(Mount {
            source: host_dir.to_string(),
            target: CONTAINER_HF_HOME.to_string(),
            read_only: false,
            kind: crate::plan::spec::MountKind::Bind,
        });
        self.env
            .insert("HF_HOME".to_string(), CONTAINER_HF_HOME.to_string());
    }

    /// Replaces (or adds) ulimits by name: `--ulimit nofile=16384`.
    pub fn override_ulimits(&mut self, overrides: &[Ulimit]) {
        for o in overrides {
            self.ulimits.retain(|u| u.name != o.name);
            self.ulimits.push(o.clone());
        }
    }

    pub fn job(&self) -> Option<&str> {
        self.labels.get(LABEL_JOB).map(|s| s.as_str())
    }

    /// The spec as a plan kept after the launch holds it: each file's bytes replaced by its
    /// SHA-256 and size.
    pub fn keep_digests_only(&mut self) {
        for f in &mut self.files {
            f.content = f.content.digest();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_name_read_from_a_file_meets_the_rule_of_one_given_on_the_command_line() {
        let ok: JobName = serde_json::from_str("\"qwen-tp2\"").unwrap();
        assert_eq!(ok.as_str(), "qwen-tp2");
        assert_eq!(serde_json::to_string(&ok).unwrap(), "\"qwen-tp2\"");
        for bad in ["\"../../x\"", "\"a b\"", "\"\"", "\"-x\""] {
            let e = serde_json::from_str::<JobName>(bad)
                .unwrap_err()
                .to_string();
            assert!(e.contains("invalid job name"), "{bad}: {e}");
        }
    }

    #[test]
    fn a_default_job_name_is_a_valid_slug_of_the_engine_and_the_model() {
        let m = crate::model::ModelSource::parse("Qwen/Qwen2.5-0.5B-Instruct", None).unwrap();
        assert_eq!(
            JobName::of_model("vllm", &m).as_str(),
            "vllm-qwen2-5-0-5b-instruct"
        );
        let m = crate::model::ModelSource::parse(&format!("org/{}", "x".repeat(90)), None).unwrap();
        assert!(JobName::of_model("trtllm", &m).as_str().len() <= 40);
        assert_eq!(JobName::slug("4x Spark", "r-").as_str(), "r-4x-spark");
    }

    #[test]
    fn a_file_is_text_when_it_is_utf8_and_base64_otherwise_and_reads_back() {
        let text = FileContent::of(b"#!/bin/sh\necho hi\n".to_vec());
        assert_eq!(text, FileContent::Text("#!/bin/sh\necho hi\n".into()));
        let raw = vec![0u8, 159, 146, 150, 255];
        let binary = FileContent::of(raw.clone());
        assert!(matches!(binary, FileContent::Base64(_)), "{binary:?}");
        assert_eq!(binary.bytes().unwrap(), raw);
        assert_eq!(
            serde_json::to_string(&text).unwrap(),
            r##"{"text":"#!/bin/sh\necho hi\n"}"##
        );
    }

    #[test]
    fn a_kept_file_is_its_digest_and_size_and_cannot_be_put_in_again() {
        let kept = FileContent::of(b"secret bytes".to_vec()).digest();
        assert_eq!(
            kept,
            FileContent::Digest {
                sha256: crate::digest::sha256_hex(b"secret bytes"),
                size: 12
            }
        );
        assert_eq!(kept.len(), 12);
        assert!(
            kept.bytes()
                .unwrap_err()
                .contains("only the file's SHA-256")
        );
        let json = serde_json::to_string(&kept).unwrap();
        assert!(!json.contains("secret"), "{json}");
        assert_eq!(serde_json::from_str::<FileContent>(&json).unwrap(), kept);
    }

    #[test]
    fn env_arguments_need_a_variable_name() {
        assert!("NCCL_DEBUG=INFO".parse::<EnvVar>().is_ok());
        assert_eq!("A=b=c".parse::<EnvVar>().unwrap().value, "b=c");
        assert!("1X=2".parse::<EnvVar>().is_err());
        assert!("novalue".parse::<EnvVar>().is_err());
    }

    #[test]
    fn a_mount_is_src_dst_and_maybe_read_only() {
        let m: Mount = "/data:/data:ro".parse().unwrap();
        assert!(m.read_only);
        assert!(!"/a:/b".parse::<Mount>().unwrap().read_only);
        assert!("/a".parse::<Mount>().is_err());
        assert!("/a:/b:rw:x".parse::<Mount>().is_err());
    }

    fn job() -> JobName {
        JobName::new("nccl-test").unwrap()
    }

    fn node() -> NodeName {
        NodeName::new("spark-a").unwrap()
    }

    #[test]
    fn every_spec_carries_our_three_labels_and_a_deterministic_name() {
        let s = ContainerSpec::new(&job(), &node(), Role::Head, "img:1");
        assert_eq!(s.name, "sl-nccl-test-spark-a");
        assert_eq!(s.labels[LABEL_JOB], "nccl-test");
        assert_eq!(s.labels[LABEL_NODE], "spark-a");
        assert_eq!(s.labels[LABEL_ROLE], "head");
    }

    #[test]
    fn a_gpu_spec_has_rdma_settings_and_infiniband_only_when_present() {
        let s = ContainerSpec::gpu(&job(), &node(), Role::Worker, "img:1", true);
        assert_eq!(s.gpus, Gpus::All);
        assert_eq!(s.network, NetworkMode::Host);
        assert_eq!(s.ipc, IpcMode::Host);
        assert_eq!(s.cap_add, vec!["IPC_LOCK"]);
        assert!(s.ulimits.contains(&Ulimit::new("memlock", -1, -1)));
        assert!(
            s.ulimits
                .contains(&Ulimit::new("stack", 67_108_864, 67_108_864))
        );
        assert!(s.ulimits.iter().any(|u| u.name == "nofile"));
        assert_eq!(s.devices[0].host, "/dev/infiniband");
        let s = ContainerSpec::gpu(&job(), &node(), Role::Worker, "img:1", false);
        assert!(s.devices.is_empty());
    }

    #[test]
    fn ulimit_overrides_replace_by_name() {
        let mut s = ContainerSpec::gpu(&job(), &node(), Role::Worker, "img:1", false);
        s.override_ulimits(&[
            "nofile=16384".parse().unwrap(),
            "memlock=8388608".parse().unwrap(),
        ]);
        assert!(s.ulimits.contains(&Ulimit::new("nofile", 16384, 16384)));
        assert!(
            s.ulimits
                .contains(&Ulimit::new("memlock", 8_388_608, 8_388_608))
        );
        assert_eq!(s.ulimits.len(), 3);
    }

    #[test]
    fn ulimit_nofile_10_5_is_refused_soft_above_hard() {
        // Seen once: `--ulimit nofile=10:5` was accepted.
        let e = "nofile=10:5".parse::<Ulimit>().unwrap_err();
        assert!(
            e.contains("soft limit (10) is above the hard limit (5)"),
            "{e}"
        );
        assert!("memlock=-1:1024".parse::<Ulimit>().is_err());
        assert!("nofile=-5".parse::<Ulimit>().is_err());
        assert_eq!("nofile=5:10".parse(), Ok(Ulimit::new("nofile", 5, 10)));
        assert_eq!(
            "memlock=1024:-1".parse(),
            Ok(Ulimit::new("memlock", 1024, -1))
        );
        assert_eq!("memlock=-1".parse(), Ok(Ulimit::new("memlock", -1, -1)));
    }

    #[test]
    fn job_names_that_would_break_container_names_are_refused() {
        assert!(JobName::new("vllm-llama3").is_ok());
        assert!(JobName::new("1job").is_err());
        assert!(JobName::new("a_b").is_err());
        assert!(JobName::new("").is_err());
        assert!("x".repeat(41).parse::<JobName>().is_err());
    }

    #[test]
    fn image_references_are_checked_before_they_reach_a_shell_or_a_file() {
        for ok in [
            "nvcr.io/nvidia/vllm:26.04-py3",
            "localhost:5000/sl/nccl-tests:2.28-arm64",
            "img@sha256:0123abcd",
            "busybox",
        ] {
            assert_eq!(check_image(ok), Ok(()), "{ok}");
        }
        for bad in ["img; touch x", "", "-v", "img\n", "$(reboot)", "a b"] {
            assert!(check_image(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn gpus_parse_none_all_and_counts() {
        assert_eq!("none".parse::<Gpus>(), Ok(Gpus::None));
        assert_eq!("all".parse::<Gpus>(), Ok(Gpus::All));
        assert_eq!("2".parse::<Gpus>(), Ok(Gpus::Count(2)));
        assert!("some".parse::<Gpus>().is_err());
    }

    #[test]
    fn a_spec_survives_a_json_round_trip() {
        let s = ContainerSpec::gpu(&job(), &node(), Role::Head, "img:1", true);
        let back: ContainerSpec =
            serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(s, back);
    }
}
