//! Live observations: what doctor must see on a running node that no snapshot holds (pings
//! between fabric addresses, SSH between nodes, listening ports, Docker, the image, a test
//! container, model files).
//!
//! Three pure steps, so every part is testable without a network: [`plan`] decides from the
//! facts what each node must try (which peer addresses to ping, at which size); [`script`] turns
//! a node's plan into one POSIX shell script; [`parse`] turns the script's output (the probe's
//! snapshot stream format, see `probe::tree`) into [`Observations`]. Running the script on
//! each node (locally or over SSH) is the caller's job: this module never runs anything.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use crate::derive::NodeInput;
use crate::derive::topology::fabric_addrs;
use crate::node::NodeName;
use crate::plan::spec::{LABEL_JOB, LABEL_NODE};
use crate::probe::facts::{MemlockLimit, NetIf};
use crate::probe::tree::{MemTree, Read, StreamError, Tree};
use crate::quote::NulByte;

/// The job label our test containers carry, so no one mistakes them for someone else's.
pub const DOCTOR_JOB: &str = "doctor";

/// A model whose weights must be on every node: a Hugging Face repo id (with an optional
/// revision) in the node's HF cache, or a folder that must hold the same files everywhere.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ModelRef {
    Hf {
        repo: String,
        revision: Option<String>,
    },
    Path(String),
}

impl std::str::FromStr for ModelRef {
    type Err = String;
    /// `org/name`, `org/name@revision`, or an absolute path.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.starts_with('/') {
            return Ok(ModelRef::Path(s.trim_end_matches('/').to_string()));
        }
        let (repo, revision) = match s.split_once('@') {
            Some((r, rev)) if !rev.is_empty() => (r, Some(rev.to_string())),
            Some(_) => return Err(format!("no revision after '@' in {s:?}")),
            None => (s, None),
        };
        let ok_part = |p: &str| {
            !p.is_empty()
                && p.chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        };
        match repo.split_once('/') {
            Some((org, name)) if ok_part(org) && ok_part(name) => Ok(ModelRef::Hf {
                repo: repo.to_string(),
                revision,
            }),
            _ => Err(format!(
                "expected a Hugging Face repo id (org/name[@revision]) or an absolute path, got {s:?}"
            )),
        }
    }
}

impl std::fmt::Display for ModelRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ModelRef::Hf {
                repo,
                revision: Some(r),
            } => write!(f, "{repo}@{r}"),
            ModelRef::Hf { repo, .. } => f.write_str(repo),
            ModelRef::Path(p) => f.write_str(p),
        }
    }
}

/// One ping from this node to a peer's fabric address.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ping {
    pub peer: NodeName,
    /// The local fabric interface it leaves by (for the report).
    pub iface: NetIf,
    /// The local fabric address it is sent from (`ping -I ADDR`). Not `-I IFACE`: that binds
    /// the socket to the interface, and a peer that resolved this address to the twin's MAC
    /// (both twins answer ARP on one link) sends the reply to the twin, where a bound socket
    /// never sees it.
    pub from: Ipv4Addr,
    pub to: Ipv4Addr,
    /// With don't-fragment at this payload (MTU - 28); `None` for a plain reachability ping.
    pub df_payload: Option<u32>,
}

/// How this node reaches a peer over SSH (`ssh -p PORT DESTINATION`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PeerLogin {
    pub peer: NodeName,
    pub destination: String,
    pub port: Option<u16>,
}

/// What one node must try.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GatherPlan {
    pub node: Option<NodeName>,
    pub pings: Vec<Ping>,
    pub ssh: Vec<PeerLogin>,
    pub image: Option<String>,
    pub model: Option<ModelRef>,
}

/// Every node's plan: plain and don't-fragment pings to every fabric address of every peer it
/// shares a subnet with (don't-fragment only where both ends have the same MTU above 1500),
/// SSH to every other node, the image and model to look for.
pub fn plan(
    nodes: &[NodeInput],
    ssh_targets: &BTreeMap<NodeName, PeerLogin>,
    image: Option<&str>,
    model: Option<&ModelRef>,
) -> Vec<GatherPlan> {
    let addrs: Vec<_> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| fabric_addrs(i, &n.facts))
        .collect();
    nodes
        .iter()
        .enumerate()
        .map(|(i, node)| {
            let mut pings = Vec::new();
            for a in addrs[i].iter().filter(|a| a.active) {
                for (j, peer) in nodes.iter().enumerate() {
                    if j == i {
                        continue;
                    }
                    for b in addrs[j].iter().filter(|b| b.active) {
                        if a.subnet() != b.subnet() {
                            continue;
                        }
                        pings.push(Ping {
                            peer: peer.name.clone(),
                            iface: a.iface.clone(),
                            from: a.addr.addr,
                            to: b.addr.addr,
                            df_payload: None,
                        });
                        let mtu_a = node.facts.interface(&a.iface).and_then(|f| f.mtu);
                        let mtu_b = peer.facts.interface(&b.iface).and_then(|f| f.mtu);
                        if let (Some(x), Some(y)) = (mtu_a, mtu_b)
                            && x == y
                            && x > 1500
                        {
                            pings.push(Ping {
                                peer: peer.name.clone(),
                                iface: a.iface.clone(),
                                from: a.addr.addr,
                                to: b.addr.addr,
                                df_payload: Some(x - 28),
                            });
                        }
                    }
                }
            }
            let ssh = nodes
                .iter()
                .filter(|p| p.name != node.name)
                .filter_map(|p| ssh_targets.get(&p.name).cloned())
                .collect();
            GatherPlan {
                node: Some(node.name.clone()),
                pings,
                ssh,
                image: image.map(str::to_string),
                model: model.cloned(),
            }
        })
        .collect()
}

fn q(s: &str) -> Result<std::borrow::Cow<'_, str>, NulByte> {
    crate::quote::quote(s, crate::quote::Style::Minimal)
}

/// The shell functions every gather script starts with. `run KEY CMD...` records the exit
/// status, stdout and the tail of stderr of one command under `KEY/`.
const PRELUDE: &str = r#"T=$(mktemp -d 2>/dev/null) || { echo 'doctor: mktemp failed' >&2; exit 1; }
trap 'rm -rf "$T"' EXIT
echo '#spark-launch-snapshot 1'
put() { printf '@%s\n' "$1"; v=$(head -c 262144 "$2"); printf '%s\n' "$v" | sed 's/^/|/'; }
run() {
  k=$1; shift
  "$@" >"$T/o" 2>"$T/e" </dev/null
  printf '@%s/rc\n|%s\n' "$k" "$?"
  put "$k/out" "$T/o"
  tail -n 20 "$T/e" >"$T/t"; put "$k/err" "$T/t"
}
run user id -un
run groups id -nG
[ -r /proc/net/tcp ] && put proc/net/tcp /proc/net/tcp
[ -r /proc/net/tcp6 ] && put proc/net/tcp6 /proc/net/tcp6
for f in /etc/cdi/* /var/run/cdi/*; do
  [ -f "$f" ] && grep -qs 'nvidia.com/gpu' "$f" && printf '@cdi/%s\n|%s\n' "${f##*/}" "$f"
done
"#;

/// Lists the files of the folder in `$m`: path, the blob it links to (HF cache), size.
const MODEL_FILES: &str = r#"printf '@model/dir\n|%s\n' "$m"
if [ -n "$m" ] && [ -d "$m" ]; then
  (cd "$m" && find . \( -type f -o -type l \) | sort | while IFS= read -r f; do
    t=$(readlink "$f" 2>/dev/null); s=$(stat -L -c %s "$f" 2>/dev/null || echo -)
    printf '%s\t%s\t%s\n' "${f#./}" "${t##*/}" "$s"
  done) >"$T/m"
  put model/files "$T/m"
  df -Pk "$m" >"$T/d" 2>/dev/null && put df/model/out "$T/d"
fi
"#;

/// The gather script for one node: one POSIX `sh` script, no arguments. A name, image or path
/// with a NUL byte is refused (no script can carry one).
pub fn script(plan: &GatherPlan) -> Result<String, NulByte> {
    let mut s = String::from(PRELUDE);
    for (i, p) in plan.pings.iter().enumerate() {
        let df = match p.df_payload {
            Some(n) => format!(" -M do -s {n}"),
            None => String::new(),
        };
        let _ = writeln!(
            s,
            "run ping/{i} ping -n -q -c 2 -i 0.2 -W 2 -I {}{df} {}",
            p.from, p.to
        );
    }
    for (i, t) in plan.ssh.iter().enumerate() {
        let port = t.port.map(|p| format!(" -p {p}")).unwrap_or_default();
        // Host keys are pinned under the node's name (as `trust` records them).
        let _ = writeln!(
            s,
            "run ssh/{i} ssh -n -o BatchMode=yes -o ConnectTimeout=5 -o ControlPath=none -o {}{port} {} true",
            q(&format!("HostKeyAlias={}", t.peer))?,
            q(&t.destination)?
        );
    }
    s.push_str(
        r#"if command -v docker >/dev/null 2>&1; then
  run docker/info docker info --format '{{json .}}'
  root=$(docker info --format '{{.DockerRootDir}}' 2>/dev/null) && [ -n "$root" ] && run df/docker df -Pk "$root"
"#,
    );
    if let Some(image) = &plan.image {
        let node = plan.node.as_ref().map(|n| n.as_str()).unwrap_or("unknown");
        let _ = writeln!(
            s,
            "  run docker/image docker image inspect --format '{{{{json .}}}}' {img}",
            img = q(image)?
        );
        let _ = writeln!(
            s,
            "  if [ \"$(cat \"$T/o\" 2>/dev/null | head -c 1)\" = '{{' ]; then\n    run docker/run docker run --rm --pull never --network none --cap-add IPC_LOCK --ulimit memlock=-1:-1 --label {job} --label {lnode} --entrypoint sh {img} -c 'ulimit -l; echo @@nccl.conf; cat /etc/nccl.conf 2>/dev/null || true'\n  fi",
            job = q(&format!("{LABEL_JOB}={DOCTOR_JOB}"))?,
            lnode = q(&format!("{LABEL_NODE}={node}"))?,
            img = q(image)?,
        );
    }
    s.push_str("else\n  printf '@docker/missing\\n|\\n'\nfi\n");
    if let Some(model) = &plan.model {
        // Sets $m to the folder whose files are compared.
        match model {
            ModelRef::Hf { repo, revision } => {
                let cache = format!("models--{}", repo.replace('/', "--"));
                let _ = writeln!(
                    s,
                    "d=\"${{HF_HOME:-$HOME/.cache/huggingface}}/hub/\"{}",
                    q(&cache)?
                );
                match revision {
                    Some(r) if r.len() == 40 && r.chars().all(|c| c.is_ascii_hexdigit()) => {
                        let _ = writeln!(s, "c={}", q(r)?);
                    }
                    other => {
                        let rev = other.as_deref().unwrap_or("main");
                        let _ = writeln!(s, "c=$(cat \"$d/refs/\"{} 2>/dev/null)", q(rev)?);
                    }
                }
                s.push_str(
                    "printf '@model/commit\\n|%s\\n' \"$c\"\nfor b in \"$d\"/blobs/*.incomplete; do [ -e \"$b\" ] && printf '@model/incomplete/%s\\n|\\n' \"${b##*/}\"; done\nm=\nif [ -n \"$c\" ]; then m=\"$d/snapshots/$c\"; fi\n",
                );
            }
            ModelRef::Path(p) => {
                let _ = writeln!(s, "m={}", q(p)?);
            }
        }
        s.push_str(MODEL_FILES);
    }
    // Every failure above is recorded in the stream; the script itself succeeded.
    s.push_str("exit 0\n");
    Ok(s)
}

/// What came of one command.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CmdOut {
    pub rc: i32,
    pub out: String,
    pub err: String,
}

impl CmdOut {
    pub fn ok(&self) -> bool {
        self.rc == 0
    }

    /// The line of stderr (or stdout) that says what went wrong, for a one-line reason: the
    /// last one that reads like an error, else the last non-empty one. Usage hints such as
    /// docker's `Run 'docker run --help' for more information` are never the reason.
    pub fn reason(&self) -> String {
        let pick = |s: &str| {
            let lines: Vec<&str> = s
                .lines()
                .map(str::trim)
                .filter(|l| !l.is_empty())
                .filter(|l| !(l.starts_with("Run '") && l.contains("--help")))
                .collect();
            let erring = |l: &&&str| {
                let l = l.to_lowercase();
                [
                    "error",
                    "denied",
                    "failed",
                    "refused",
                    "cannot",
                    "unreachable",
                    "timed out",
                ]
                .iter()
                .any(|w| l.contains(w))
            };
            lines
                .iter()
                .rev()
                .find(erring)
                .or_else(|| lines.last())
                .map(|l| l.to_string())
        };
        pick(&self.err)
            .or_else(|| pick(&self.out))
            .unwrap_or_else(|| format!("exit status {}", self.rc))
    }
}

/// The result of one planned ping.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PingResult {
    pub ping: Ping,
    pub result: Option<CmdOut>,
}

/// The result of one planned SSH attempt.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SshResult {
    pub target: PeerLogin,
    pub result: Option<CmdOut>,
}

/// What `docker info` says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DockerInfo {
    pub server_version: Option<String>,
    pub root_dir: Option<String>,
    pub runtimes: Vec<String>,
    pub default_runtime: Option<String>,
    pub cdi_spec_dirs: Vec<String>,
    pub architecture: Option<String>,
}

/// Whether Docker could be used on the node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum DockerState {
    /// No `docker` command.
    NotInstalled,
    /// `docker info` failed (daemon down, socket permission...).
    Unreachable {
        error: String,
    },
    Reachable(DockerInfo),
}

/// What `docker image inspect` says about the image.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageInfo {
    pub id: String,
    pub repo_digests: Vec<String>,
    pub architecture: Option<String>,
    pub variant: Option<String>,
    pub os: Option<String>,
    pub size: Option<u64>,
}

/// The image on this node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum ImageState {
    Absent,
    Present(ImageInfo),
    Error { error: String },
}

/// What the test container saw (started like our jobs: memlock=-1, IPC_LOCK).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case", tag = "state")]
pub enum ContainerState {
    Ran {
        memlock: Option<MemlockLimit>,
        nccl_conf: Option<String>,
    },
    Failed {
        error: String,
    },
}

/// One file of a model folder: its path, the blob it links to (HF cache), its size.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelFile {
    pub path: String,
    pub blob: Option<String>,
    pub size: Option<u64>,
}

/// The model on this node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModelState {
    /// The snapshot folder (or the path given); empty when the revision is not in the cache.
    pub dir: String,
    pub commit: Option<String>,
    /// `None` when the folder does not exist.
    pub files: Option<Vec<ModelFile>>,
    /// Blobs still downloading (`*.incomplete`).
    pub incomplete: Vec<String>,
    pub free_kib: Option<u64>,
}

/// Everything gathered on one live node.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Observations {
    pub user: Option<String>,
    pub groups: Vec<String>,
    pub pings: Vec<PingResult>,
    pub ssh: Vec<SshResult>,
    /// TCP ports in LISTEN (IPv4 and IPv6); `None` when `/proc/net/tcp` could not be read.
    pub listening: Option<BTreeSet<u16>>,
    /// CDI spec files that define `nvidia.com/gpu`.
    pub cdi_nvidia: Vec<String>,
    pub docker: Option<DockerState>,
    /// Free KiB where Docker keeps images.
    pub docker_free_kib: Option<u64>,
    pub image: Option<ImageState>,
    pub container: Option<ContainerState>,
    pub model: Option<ModelState>,
    /// What the loader of a container of `--image` resolves for `libnccl.so.2` (read through
    /// the node's Docker Engine, not by the script); `None` when not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nccl: Option<crate::libnccl::ImageRead>,
}

/// The output of a gather script could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GatherError {
    #[error("the doctor script printed something unexpected: {0}")]
    Stream(#[from] StreamError),
}

fn cmd(tree: &MemTree, key: &str) -> Option<CmdOut> {
    let rc = tree.read(&format!("{key}/rc")).value()?.parse().ok()?;
    let text = |k: &str| match tree.read(&format!("{key}/{k}")) {
        Read::Value(v) => v,
        _ => String::new(),
    };
    Some(CmdOut {
        rc,
        out: text("out"),
        err: text("err"),
    })
}

/// Reads a gather script's output, with the plan it ran.
pub fn parse(plan: &GatherPlan, stream: &str) -> Result<Observations, GatherError> {
    let t = MemTree::parse(stream)?;
    let mut o = Observations {
        user: cmd(&t, "user")
            .filter(CmdOut::ok)
            .map(|c| c.out.trim().to_string()),
        groups: cmd(&t, "groups")
            .filter(CmdOut::ok)
            .map(|c| c.out.split_whitespace().map(str::to_string).collect())
            .unwrap_or_default(),
        ..Default::default()
    };
    o.pings = plan
        .pings
        .iter()
        .enumerate()
        .map(|(i, p)| PingResult {
            ping: p.clone(),
            result: cmd(&t, &format!("ping/{i}")),
        })
        .collect();
    o.ssh = plan
        .ssh
        .iter()
        .enumerate()
        .map(|(i, s)| SshResult {
            target: s.clone(),
            result: cmd(&t, &format!("ssh/{i}")),
        })
        .collect();
    let tcp4 = t.read("proc/net/tcp").value();
    let tcp6 = t.read("proc/net/tcp6").value();
    if tcp4.is_some() || tcp6.is_some() {
        let mut ports = BTreeSet::new();
        for text in [tcp4, tcp6].into_iter().flatten() {
            ports.extend(listening_ports(&text));
        }
        o.listening = Some(ports);
    }
    o.cdi_nvidia = t.list("cdi");
    o.docker = if t.exists("docker/missing") {
        Some(DockerState::NotInstalled)
    } else {
        cmd(&t, "docker/info").map(|c| {
            if c.ok() {
                DockerState::Reachable(parse_docker_info(&c.out))
            } else {
                DockerState::Unreachable { error: c.reason() }
            }
        })
    };
    o.docker_free_kib = cmd(&t, "df/docker")
        .filter(CmdOut::ok)
        .and_then(|c| df_avail_kib(&c.out));
    o.image = cmd(&t, "docker/image").map(|c| {
        if c.ok() {
            match parse_image(&c.out) {
                Some(i) => ImageState::Present(i),
                None => ImageState::Error {
                    error: format!("unreadable `docker image inspect` output: {}", c.reason()),
                },
            }
        } else if c.err.contains("No such image") || c.err.contains("No such object") {
            ImageState::Absent
        } else {
            ImageState::Error { error: c.reason() }
        }
    });
    o.container = cmd(&t, "docker/run").map(|c| {
        if c.ok() {
            let (limit, conf) = match c.out.split_once("@@nccl.conf") {
                Some((l, rest)) => (l, rest.trim_start_matches('\n')),
                None => (c.out.as_str(), ""),
            };
            ContainerState::Ran {
                memlock: MemlockLimit::parse(limit),
                nccl_conf: (!conf.trim().is_empty()).then(|| conf.trim_end().to_string()),
            }
        } else {
            ContainerState::Failed { error: c.reason() }
        }
    });
    if plan.model.is_some() {
        let dir = t.read("model/dir").value().unwrap_or_default();
        let files = match t.read("model/files") {
            Read::Value(v) => Some(parse_model_files(&v)),
            _ => None,
        };
        o.model = Some(ModelState {
            dir,
            commit: t.read("model/commit").value(),
            files,
            incomplete: t.list("model/incomplete"),
            free_kib: t
                .read("df/model/out")
                .value()
                .and_then(|v| df_avail_kib(&v)),
        });
    }
    Ok(o)
}

/// Local ports in state LISTEN (`0A`) from `/proc/net/tcp` or `tcp6`.
pub fn listening_ports(text: &str) -> BTreeSet<u16> {
    text.lines()
        .skip(1)
        .filter_map(|l| {
            let mut cols = l.split_whitespace();
            let local = cols.nth(1)?;
            let state = cols.nth(1)?;
            if state != "0A" {
                return None;
            }
            let port = local.rsplit_once(':')?.1;
            u16::from_str_radix(port, 16).ok()
        })
        .collect()
}

/// The `Available` column of `df -Pk` (second line, fourth column), in KiB.
fn df_avail_kib(text: &str) -> Option<u64> {
    text.lines().nth(1)?.split_whitespace().nth(3)?.parse().ok()
}

/// The strings of a JSON array field; empty when absent or not an array.
fn str_array(v: &serde_json::Value, key: &str) -> Vec<String> {
    v.get(key)
        .and_then(|r| r.as_array())
        .map(|a| {
            a.iter()
                .filter_map(|x| x.as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default()
}

fn parse_docker_info(json: &str) -> DockerInfo {
    let v: serde_json::Value = serde_json::from_str(json.trim()).unwrap_or_default();
    let s = |k: &str| v.get(k).and_then(|x| x.as_str()).map(str::to_string);
    let mut runtimes: Vec<String> = v
        .get("Runtimes")
        .and_then(|r| r.as_object())
        .map(|m| m.keys().cloned().collect())
        .unwrap_or_default();
    runtimes.sort();
    DockerInfo {
        server_version: s("ServerVersion"),
        root_dir: s("DockerRootDir"),
        runtimes,
        default_runtime: s("DefaultRuntime"),
        cdi_spec_dirs: str_array(&v, "CDISpecDirs"),
        architecture: s("Architecture"),
    }
}

fn parse_image(json: &str) -> Option<ImageInfo> {
    let v: serde_json::Value = serde_json::from_str(json.trim()).ok()?;
    let s = |k: &str| {
        v.get(k)
            .and_then(|x| x.as_str())
            .filter(|x| !x.is_empty())
            .map(str::to_string)
    };
    Some(ImageInfo {
        id: s("Id")?,
        repo_digests: str_array(&v, "RepoDigests"),
        architecture: s("Architecture"),
        variant: s("Variant"),
        os: s("Os"),
        size: v.get("Size").and_then(|x| x.as_u64()),
    })
}

fn parse_model_files(text: &str) -> Vec<ModelFile> {
    text.lines()
        .filter(|l| !l.is_empty())
        .map(|l| {
            let mut cols = l.split('\t');
            let path = cols.next().unwrap_or_default().to_string();
            let blob = cols.next().filter(|b| !b.is_empty()).map(str::to_string);
            let size = cols.next().and_then(|s| s.trim().parse().ok());
            ModelFile { path, blob, size }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::testkit::{Node, name, pair};

    #[test]
    fn model_refs_are_a_repo_id_with_an_optional_revision_or_an_absolute_path() {
        assert_eq!(
            "Qwen/Qwen3-8B@abc".parse::<ModelRef>().unwrap(),
            ModelRef::Hf {
                repo: "Qwen/Qwen3-8B".into(),
                revision: Some("abc".into())
            }
        );
        assert_eq!(
            "/models/x/".parse::<ModelRef>().unwrap(),
            ModelRef::Path("/models/x".into())
        );
        assert!("justaname".parse::<ModelRef>().is_err());
        assert!("a/b;rm".parse::<ModelRef>().is_err());
        assert!("a/b@".parse::<ModelRef>().is_err());
    }

    #[test]
    fn every_node_pings_every_peer_fabric_address_plain_and_at_mtu_minus_28() {
        let plans = plan(&pair(), &BTreeMap::new(), None, None);
        let a = &plans[0];
        assert_eq!(a.pings.len(), 2);
        assert_eq!(a.pings[0].to.to_string(), "192.168.177.12");
        assert_eq!(a.pings[0].iface.as_str(), "enp1s0f1np1");
        assert_eq!(a.pings[0].df_payload, None);
        assert_eq!(a.pings[1].df_payload, Some(8972));
        assert_eq!(plans[1].pings[0].to.to_string(), "192.168.177.11");
    }

    #[test]
    fn no_dont_fragment_ping_is_planned_across_a_link_whose_mtus_differ() {
        let mut nodes = pair();
        nodes[1] = Node::cabled_spark("spark-b", "192.168.177.12/24")
            .mtu("enp1s0f1np1", 1500)
            .named("spark-b");
        let plans = plan(&nodes, &BTreeMap::new(), None, None);
        assert!(plans[0].pings.iter().all(|p| p.df_payload.is_none()));
    }

    #[test]
    fn the_script_for_a_node_is_stable() {
        let mut targets = BTreeMap::new();
        for n in ["spark-a", "spark-b"] {
            targets.insert(
                name(n),
                PeerLogin {
                    peer: name(n),
                    destination: format!("user@{n}"),
                    port: Some(22),
                },
            );
        }
        let model: ModelRef = "Qwen/Qwen3-8B".parse().unwrap();
        let plans = plan(
            &pair(),
            &targets,
            Some("nvcr.io/nvidia/vllm:25.11-py3"),
            Some(&model),
        );
        insta::assert_snapshot!(script(&plans[0]).unwrap());
    }

    const TCP: &str = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n   0: 00000000:18EB 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0\n   1: 0100007F:1F40 0100007F:9C40 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 100 0 0 10 0\n";

    #[test]
    fn a_command_reason_is_its_error_line_not_a_usage_hint() {
        let c = CmdOut {
            rc: 125,
            out: String::new(),
            err: "docker: Error response from daemon: failed to create shim task: error setting rlimits for ready process: operation not permitted: unknown\n\nRun 'docker run --help' for more information\n".into(),
        };
        assert!(c.reason().starts_with("docker: Error response from daemon"));
        let quiet = CmdOut {
            rc: 1,
            out: String::new(),
            err: String::new(),
        };
        assert_eq!(quiet.reason(), "exit status 1");
    }

    #[test]
    fn listening_ports_are_read_from_proc_net_tcp_and_established_ones_ignored() {
        let p = listening_ports(TCP);
        assert_eq!(p.into_iter().collect::<Vec<_>>(), vec![6379]);
    }

    #[test]
    fn a_gather_stream_reads_back_into_observations() {
        let plans = plan(&pair(), &BTreeMap::new(), Some("img:1"), None);
        let stream = format!(
            "#spark-launch-snapshot 1\n@user/rc\n|0\n@user/out\n|nvidia\n@groups/rc\n|0\n@groups/out\n|nvidia adm docker\n@proc/net/tcp\n{}\n@ping/0/rc\n|0\n@ping/0/out\n|2 packets transmitted, 2 received\n@ping/1/rc\n|1\n@ping/1/out\n|\n@ping/1/err\n|ping: local error: message too long, mtu=1500\n@docker/info/rc\n|0\n@docker/info/out\n|{{\"ServerVersion\":\"28.3.3\",\"DockerRootDir\":\"/var/lib/docker\",\"Runtimes\":{{\"runc\":{{}},\"nvidia\":{{}}}},\"Architecture\":\"aarch64\"}}\n@df/docker/rc\n|0\n@df/docker/out\n|Filesystem 1024-blocks Used Available Capacity Mounted on\n|/dev/nvme0n1p2 3844551496 512 3000000000 14% /\n@docker/image/rc\n|0\n@docker/image/out\n|{{\"Id\":\"sha256:aa\",\"RepoDigests\":[\"img@sha256:bb\"],\"Architecture\":\"arm64\",\"Os\":\"linux\",\"Size\":20000000000}}\n@docker/run/rc\n|0\n@docker/run/out\n|unlimited\n|@@nccl.conf\n|NCCL_DEBUG=WARN\n@cdi/nvidia.yaml\n|/etc/cdi/nvidia.yaml\n",
            TCP.lines()
                .map(|l| format!("|{l}"))
                .collect::<Vec<_>>()
                .join("\n")
        );
        let o = parse(&plans[0], &stream).unwrap();
        assert_eq!(o.user.as_deref(), Some("nvidia"));
        assert!(o.groups.contains(&"docker".to_string()));
        assert!(o.pings[0].result.as_ref().unwrap().ok());
        assert_eq!(
            o.pings[1].result.as_ref().unwrap().reason(),
            "ping: local error: message too long, mtu=1500"
        );
        assert_eq!(o.listening.unwrap().len(), 1);
        let Some(DockerState::Reachable(info)) = &o.docker else {
            panic!("{:?}", o.docker)
        };
        assert_eq!(info.runtimes, vec!["nvidia", "runc"]);
        assert_eq!(o.docker_free_kib, Some(3_000_000_000));
        let Some(ImageState::Present(img)) = &o.image else {
            panic!()
        };
        assert_eq!(img.repo_digests, vec!["img@sha256:bb"]);
        assert_eq!(
            o.container,
            Some(ContainerState::Ran {
                memlock: Some(MemlockLimit::Unlimited),
                nccl_conf: Some("NCCL_DEBUG=WARN".into())
            })
        );
        assert_eq!(o.cdi_nvidia, vec!["nvidia.yaml"]);
    }
}
