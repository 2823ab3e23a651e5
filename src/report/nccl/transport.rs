//! The transport NCCL really used, per process, read from its own `NCCL_DEBUG=INFO` lines —
//! and what is wrong with it: a fallback to TCP sockets, or an RDMA device the node should use
//! but NCCL did not open (the missing twin).
//!
//! The lines that tell the truth:
//! - `NET/IB : Using [0]rocep1s0f1:1/RoCE [1]roceP2p1s0f1:1/RoCE [RO]; OOB ...`: the RDMA
//!   devices NCCL opened; `NET/IB : No device found.`: none.
//! - `Using network IB` / `Using network Socket`: the network plugin of the communicator.
//! - `Channel 00/0 : 0[0] -> 1[1] [send] via NET/IB/0/GDRDMA`, `via NET/Socket/0`,
//!   `via P2P/CUMEM`, `via SHM/direct/direct`: the path each channel's data takes. These are
//!   decisive: `Using network Socket` is printed on single-node runs too, where every channel
//!   goes over NVLink or PCIe and the network is never used.
//! - `NCCL_IB_HCA set to ...`, `NCCL_IB_DISABLE set by environment to 1.`: what was asked.
//!
//! Works on any log with NCCL debug lines (nccl-tests, vLLM, PyTorch): [`detect_transport`]
//! and [`transport_problems`] are the entry points other analysers reuse. Pure.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Serialize, Serializer};

use super::line::{self, DebugLine};
use crate::problem::Problem;

/// What one process's NCCL said about its transports.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ProcessTransport {
    /// The hostname NCCL printed (up to the first `.`).
    pub host: String,
    pub pid: u32,
    /// The global ranks this process holds (one per GPU it drives).
    pub ranks: Vec<u32>,
    pub nranks: Option<u32>,
    /// `nNodes` of the communicator: how many hosts NCCL believes take part.
    pub nnodes: Option<u32>,
    /// The CUDA device of the process's main thread.
    pub cuda_dev: Option<i32>,
    /// `2.28.3+cuda13.0`.
    pub nccl_version: Option<String>,
    /// `Using network X`: the network plugin chosen (`IB`, `Socket`, a plugin's name).
    pub network: Option<String>,
    /// The RDMA devices NCCL opened (`NET/IB : Using`), in NCCL's order.
    pub ib_devices: Vec<IbPort>,
    /// Virtual devices NCCL made by merging ports (`NET/IB : Made virtual device`).
    pub ib_merged: Vec<IbMerged>,
    /// `NET/IB : No device found.` was printed.
    pub ib_no_device: bool,
    /// `NCCL_IB_HCA` as NCCL read it.
    pub ib_hca_env: Option<String>,
    /// `NCCL_IB_DISABLE` was set to 1.
    pub ib_disabled: bool,
    /// The interfaces the socket plugin opened (`NET/Socket : Using`), `name:address`.
    pub socket_ifaces: Vec<String>,
    /// The paths this process's channels take.
    pub paths: BTreeSet<Path>,
    /// The `NET/<plugin>/<dev>` device indexes channels use.
    pub net_devs: BTreeSet<u32>,
    /// Some network channel uses GPUDirect RDMA (`/GDRDMA`).
    pub gdr: bool,
    /// The verdict on the data path of this process.
    pub transport: Transport,
}

impl ProcessTransport {
    /// `rank 0` / `ranks 0,1` / `pid 1234` when no rank is known.
    pub fn label(&self) -> String {
        match self.ranks.as_slice() {
            [] => format!("pid {}", self.pid),
            [r] => format!("rank {r}"),
            rs => format!(
                "ranks {}",
                rs.iter().map(u32::to_string).collect::<Vec<_>>().join(",")
            ),
        }
    }

    /// The names of the RDMA devices NCCL opened, merged ones split into their parts.
    pub fn ib_device_names(&self) -> BTreeSet<String> {
        let mut out: BTreeSet<String> = self.ib_devices.iter().map(|d| d.device.clone()).collect();
        for m in &self.ib_merged {
            out.extend(m.name.split('+').map(str::to_string));
        }
        out
    }
}

/// One RDMA port NCCL opened: `[0]rocep1s0f1:1/RoCE`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IbPort {
    pub index: u32,
    pub device: String,
    pub port: u32,
    /// `RoCE` or `IB`.
    pub link: String,
}

/// `NET/IB : Made virtual device [2] name=rocep1s0f1+roceP2p1s0f1 ...`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct IbMerged {
    pub index: u32,
    pub name: String,
}

/// The path one channel's data takes.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Path {
    /// GPU to GPU over NVLink or PCIe (`P2P/CUMEM`, `P2P/IPC`, `P2P/direct pointer`).
    P2p,
    /// Through host shared memory (`SHM/direct/direct`).
    Shm,
    /// RDMA through the IB verbs plugin (`NET/IB/0`).
    NetIb,
    /// TCP sockets (`NET/Socket/0`).
    NetSocket,
    /// Another network plugin (`NET/Mesh/0`).
    Net(String),
    /// NCCL's collective network (`COLLNET/...`).
    CollNet,
}

impl Path {
    pub fn as_str(&self) -> &str {
        match self {
            Path::P2p => "P2P",
            Path::Shm => "SHM",
            Path::NetIb => "NET/IB",
            Path::NetSocket => "NET/Socket",
            Path::Net(n) => n,
            Path::CollNet => "CollNet",
        }
    }
}

impl Serialize for Path {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

/// What carried one process's data.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Transport {
    /// RDMA (RoCE or InfiniBand) through `NET/IB`.
    Rdma,
    /// TCP sockets: the silent fallback.
    Socket,
    /// Only intra-node paths (NVLink/PCIe P2P, shared memory); no network needed.
    IntraNode,
    /// A third-party network plugin (`NET/<name>`), e.g. the mesh plugin.
    Plugin,
    /// The log does not say (no channel lines, no network line).
    #[default]
    Unknown,
}

impl Transport {
    pub fn describe(self) -> &'static str {
        match self {
            Transport::Rdma => "RDMA (NET/IB)",
            Transport::Socket => "TCP sockets (NET/Socket)",
            Transport::IntraNode => "intra-node (P2P/SHM)",
            Transport::Plugin => "network plugin",
            Transport::Unknown => "unknown",
        }
    }
}

/// Every process seen in a log, ordered by first rank (then host and pid).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct TransportReport {
    pub processes: Vec<ProcessTransport>,
}

impl TransportReport {
    pub fn is_empty(&self) -> bool {
        self.processes.is_empty()
    }

    /// The distinct hosts, in process order.
    pub fn hosts(&self) -> Vec<&str> {
        let mut seen = BTreeSet::new();
        self.processes
            .iter()
            .map(|p| p.host.as_str())
            .filter(|h| seen.insert(*h))
            .collect()
    }

    /// Largest `nNodes` any communicator reported.
    pub fn nnodes(&self) -> Option<u32> {
        self.processes.iter().filter_map(|p| p.nnodes).max()
    }

    /// True when some process's data went over TCP sockets.
    pub fn fell_back_to_sockets(&self) -> bool {
        self.processes
            .iter()
            .any(|p| p.transport == Transport::Socket)
    }
}

/// Reads the transports of every process from a whole log (any tool's).
pub fn detect_transport(log: &str) -> TransportReport {
    let mut scan = TransportScan::default();
    for raw in log.lines() {
        let (_, text) = line::strip_tag(raw);
        if let Some(d) = line::debug_line(text) {
            scan.feed(&d);
        } else if let Some(v) = text.trim().strip_prefix("NCCL version ") {
            scan.version_line(v);
        }
    }
    scan.finish()
}

/// Accumulates debug lines; [`TransportScan::finish`] classifies each process.
#[derive(Default)]
pub struct TransportScan {
    procs: BTreeMap<(String, u32), ProcessTransport>,
    /// `NCCL version` printed without a host (NCCL_DEBUG=VERSION), applied to all.
    version: Option<String>,
}

impl TransportScan {
    /// No debug line seen yet.
    pub fn is_empty(&self) -> bool {
        self.procs.is_empty()
    }

    pub fn version_line(&mut self, v: &str) {
        self.version = Some(v.trim().to_string());
    }

    pub fn feed(&mut self, d: &DebugLine<'_>) {
        let p = self
            .procs
            .entry((d.host.to_string(), d.pid))
            .or_insert_with(|| ProcessTransport {
                host: d.host.to_string(),
                pid: d.pid,
                ..ProcessTransport::default()
            });
        if d.tid == d.pid && p.cuda_dev.is_none() {
            p.cuda_dev = Some(d.cuda_dev);
        }
        let m = d.message;
        if let Some(v) = m.strip_prefix("NCCL version ") {
            p.nccl_version = Some(v.trim().to_string());
        } else if let Some(n) = m.strip_prefix("Using network ") {
            p.network = Some(n.trim().to_string());
        } else if let Some(rest) = m.strip_prefix("NET/IB : Using") {
            p.ib_devices = ib_ports(rest);
        } else if m.starts_with("NET/IB : No device found") {
            p.ib_no_device = true;
        } else if let Some(rest) = m.strip_prefix("NET/IB : Made virtual device [") {
            if let Some((idx, rest)) = rest.split_once(']')
                && let Ok(index) = idx.parse()
                && let Some(name) = rest
                    .split_whitespace()
                    .find_map(|t| t.strip_prefix("name="))
            {
                p.ib_merged.push(IbMerged {
                    index,
                    name: name.to_string(),
                });
            }
        } else if let Some(rest) = m.strip_prefix("NCCL_IB_HCA set") {
            let v = rest
                .trim_start()
                .trim_start_matches("by environment")
                .trim_start()
                .trim_start_matches("to")
                .trim();
            p.ib_hca_env = Some(v.to_string());
        } else if let Some(rest) = m.strip_prefix("NCCL_IB_DISABLE set by environment to") {
            p.ib_disabled = rest.trim().trim_end_matches('.') == "1";
        } else if let Some(rest) = m.strip_prefix("NET/Socket : Using") {
            p.socket_ifaces = rest
                .split_whitespace()
                .filter_map(|t| {
                    let t = t.strip_prefix('[')?;
                    let (_, name) = t.split_once(']')?;
                    Some(name.split('<').next().unwrap_or(name).to_string())
                })
                .collect();
        } else if (m.starts_with("Channel ") || m.starts_with("CollNet "))
            && let Some((_, via)) = m.split_once(" via ")
        {
            let via = via.trim();
            if let Some(net) = via.strip_prefix("NET/") {
                let mut parts = net.split('/');
                let plugin = parts.next().unwrap_or("");
                let dev: String = parts
                    .next()
                    .unwrap_or("")
                    .chars()
                    .take_while(|c| c.is_ascii_digit())
                    .collect();
                if let Ok(dev) = dev.parse() {
                    p.net_devs.insert(dev);
                }
                p.paths.insert(match plugin {
                    "IB" => Path::NetIb,
                    "Socket" => Path::NetSocket,
                    other => Path::Net(format!("NET/{other}")),
                });
                if via.contains("/GDRDMA") {
                    p.gdr = true;
                }
            } else if via.starts_with("P2P") {
                p.paths.insert(Path::P2p);
            } else if via.starts_with("SHM") {
                p.paths.insert(Path::Shm);
            } else if via.starts_with("COLLNET") {
                p.paths.insert(Path::CollNet);
            }
        } else if m.starts_with("ncclCommInitRank") || m.starts_with("comm 0x") {
            if let Some(r) = line::int_after(m, "rank").and_then(|r| u32::try_from(r).ok())
                && !p.ranks.contains(&r)
            {
                p.ranks.push(r);
                p.ranks.sort_unstable();
            }
            if let Some(n) = line::int_after(m, "nranks")
                .or_else(|| line::int_after(m, "nRanks"))
                .and_then(|n| u32::try_from(n).ok())
            {
                p.nranks = Some(n);
            }
            if let Some(n) = line::int_after(m, "nNodes").and_then(|n| u32::try_from(n).ok()) {
                p.nnodes = Some(n);
            }
        }
    }

    pub fn finish(self) -> TransportReport {
        let mut processes: Vec<ProcessTransport> = self
            .procs
            .into_values()
            .map(|mut p| {
                if p.nccl_version.is_none() {
                    p.nccl_version = self.version.clone();
                }
                p.transport = classify(&p);
                p
            })
            .collect();
        processes.sort_by(|a, b| {
            a.ranks
                .first()
                .unwrap_or(&u32::MAX)
                .cmp(b.ranks.first().unwrap_or(&u32::MAX))
                .then(a.host.cmp(&b.host))
                .then(a.pid.cmp(&b.pid))
        });
        TransportReport { processes }
    }
}

/// ` [0]rocep1s0f1:1/RoCE [1]roceP2p1s0f1:1/RoCE [RO]; OOB enp1s0f1np1:192.168.177.11<0>`.
fn ib_ports(rest: &str) -> Vec<IbPort> {
    let list = rest.split(';').next().unwrap_or(rest);
    list.split_whitespace()
        .filter_map(|t| {
            let t = t.strip_prefix('[')?;
            let (idx, spec) = t.split_once(']')?;
            let index = idx.parse().ok()?;
            let (dev_port, link) = spec.rsplit_once('/').unwrap_or((spec, ""));
            let mut parts = dev_port.split(':');
            let device = parts.next()?.to_string();
            let port = parts.next().and_then(|p| p.parse().ok()).unwrap_or(1);
            Some(IbPort {
                index,
                device,
                port,
                link: link.to_string(),
            })
        })
        .collect()
}

fn classify(p: &ProcessTransport) -> Transport {
    if p.paths.contains(&Path::NetSocket) {
        return Transport::Socket;
    }
    if p.paths.contains(&Path::NetIb) {
        return Transport::Rdma;
    }
    if p.paths
        .iter()
        .any(|x| matches!(x, Path::Net(_) | Path::CollNet))
    {
        return Transport::Plugin;
    }
    if !p.paths.is_empty() {
        return Transport::IntraNode;
    }
    // No channel lines: only the communicator's network and node count can say.
    match (p.nnodes, p.network.as_deref()) {
        (Some(1), _) => Transport::IntraNode,
        (Some(_), Some("IB")) => Transport::Rdma,
        (Some(_), Some("Socket")) => Transport::Socket,
        (Some(_), Some(_)) => Transport::Plugin,
        _ => Transport::Unknown,
    }
}

/// The RDMA devices each host is expected to use (the derived `NCCL_IB_HCA`), by the hostname
/// NCCL prints. Hosts missing here are checked against the `NCCL_IB_HCA` their log shows.
pub type ExpectedHcas = BTreeMap<String, Vec<String>>;

/// One `--expect-hca HOST=dev1,dev2`: the host and the devices it must use.
pub fn parse_expected_hca(s: &str) -> Result<(String, Vec<String>), String> {
    let bad = || format!("expected HOST=dev1,dev2, got {s:?}");
    let (host, devs) = s.split_once('=').ok_or_else(bad)?;
    let devs: Vec<String> = devs
        .split(',')
        .map(str::trim)
        .filter(|d| !d.is_empty())
        .map(str::to_string)
        .collect();
    if host.is_empty() || devs.is_empty() {
        return Err(bad());
    }
    Ok((host.to_string(), devs))
}

/// What kind of transport problem.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum ProblemKind {
    /// Data went over TCP sockets instead of RDMA.
    SocketFallback,
    /// An RDMA device in `NCCL_IB_HCA` (a twin) was not opened.
    MissingHca,
    /// NCCL opened several RDMA devices but its channels use only some of them.
    IdleHca,
}

impl ProblemKind {
    /// Problems that fail a verdict; the others are warnings.
    pub fn fails(self) -> bool {
        !matches!(self, ProblemKind::IdleHca)
    }
}

/// One transport problem on one host, with the fix.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TransportProblem {
    pub kind: ProblemKind,
    pub host: String,
    /// `rank 0`, `ranks 0,1`.
    pub ranks: String,
    #[serde(flatten)]
    pub problem: Problem,
}

/// Checks every process: a socket fallback, a missing or idle RDMA device.
pub fn transport_problems(
    report: &TransportReport,
    expected: &ExpectedHcas,
) -> Vec<TransportProblem> {
    let mut out: Vec<TransportProblem> = Vec::new();
    for p in &report.processes {
        let mut push = |kind, problem: String, fix: String| {
            if let Some(same) = out
                .iter_mut()
                .find(|o| o.kind == kind && o.host == p.host && o.problem.what == problem)
            {
                same.ranks = merge_labels(&same.ranks, &p.label());
            } else {
                out.push(TransportProblem {
                    kind,
                    host: p.host.clone(),
                    ranks: p.label(),
                    problem: Problem::new(problem, fix),
                });
            }
        };
        match p.transport {
            Transport::Socket => {
                let (why, fix) = socket_cause(p);
                push(
                    ProblemKind::SocketFallback,
                    format!(
                        "data went over TCP sockets (via NET/Socket), not RDMA{why}; TCP reaches a fraction of the link's bandwidth"
                    ),
                    fix,
                );
            }
            Transport::Rdma => {
                let want: Option<Vec<String>> = expected.get(&p.host).cloned().or_else(|| {
                    let env = p.ib_hca_env.as_deref()?;
                    if env.starts_with('^') {
                        return None;
                    }
                    Some(env.split(',').map(str::to_string).collect())
                });
                let used = p.ib_device_names();
                if let Some(want) = want {
                    let missing: Vec<String> = want
                        .iter()
                        .filter_map(|w| {
                            let exact = w.starts_with('=');
                            let name = w.trim_start_matches('=');
                            let name = name.split(':').next().unwrap_or(name).trim();
                            if name.is_empty() {
                                return None;
                            }
                            let found = used.iter().any(|u| {
                                if exact {
                                    u == name
                                } else {
                                    u.starts_with(name)
                                }
                            });
                            (!found).then(|| name.to_string())
                        })
                        .collect();
                    if !missing.is_empty() {
                        let opened: Vec<&str> = used.iter().map(String::as_str).collect();
                        let fix_dev = &missing[0];
                        push(
                            ProblemKind::MissingHca,
                            format!(
                                "NCCL_IB_HCA asks for {} but NCCL opened only {}: {} carr{} no traffic, so this node runs on part of its link (on a DGX Spark one twin gives about 12 GB/s all_gather busbw instead of about 22)",
                                want.join(","),
                                if opened.is_empty() {
                                    "none".to_string()
                                } else {
                                    opened.join(",")
                                },
                                missing.join(", "),
                                if missing.len() == 1 { "ies" } else { "y" },
                            ),
                            format!(
                                "on {host}: `cat /sys/class/infiniband/{fix_dev}/ports/1/state` must read `4: ACTIVE`; bring its netdev up with the same MTU as its twin (`sudo ip link set <netdev> up mtu 9000`, and in /etc/netplan), then `spark-launch doctor`",
                                host = p.host
                            ),
                        );
                    }
                }
                let merged = !p.ib_merged.is_empty();
                if !merged && p.ib_devices.len() >= 2 && !p.net_devs.is_empty() {
                    let idle: Vec<&str> = p
                        .ib_devices
                        .iter()
                        .filter(|d| !p.net_devs.contains(&d.index))
                        .map(|d| d.device.as_str())
                        .collect();
                    if !idle.is_empty() {
                        push(
                            ProblemKind::IdleHca,
                            format!(
                                "NCCL opened {} but no channel of this process uses {}",
                                p.ib_devices
                                    .iter()
                                    .map(|d| d.device.as_str())
                                    .collect::<Vec<_>>()
                                    .join(","),
                                idle.join(",")
                            ),
                            "check that the idle device's port is on the same link as the others (`spark-launch doctor`); with one GPU per node NCCL spreads channels over equally close NICs".to_string(),
                        );
                    }
                }
            }
            _ => {}
        }
    }
    out
}

fn merge_labels(a: &str, b: &str) -> String {
    let nums = |s: &str| -> Vec<String> {
        s.trim_start_matches("ranks ")
            .trim_start_matches("rank ")
            .split(',')
            .map(str::to_string)
            .collect()
    };
    let mut all = nums(a);
    for n in nums(b) {
        if !all.contains(&n) {
            all.push(n);
        }
    }
    format!("ranks {}", all.join(","))
}

/// Why a process fell back to sockets, as far as its log says, and the fix.
fn socket_cause(p: &ProcessTransport) -> (String, String) {
    if p.ib_disabled {
        return (
            ": NCCL_IB_DISABLE=1 turned RDMA off".into(),
            "unset NCCL_IB_DISABLE (spark-launch sets NCCL_IB_DISABLE=0 for every node)".into(),
        );
    }
    if p.ib_no_device {
        return match &p.ib_hca_env {
            Some(env) => (
                format!(": NCCL found no RDMA device matching NCCL_IB_HCA={env}"),
                format!(
                    "the names differ per node: compare NCCL_IB_HCA with `ls /sys/class/infiniband` on {} (`spark-launch env` derives them per node); in a container, pass `--device /dev/infiniband`",
                    p.host
                ),
            ),
            None => (
                ": NCCL found no RDMA device (`NET/IB : No device found.`)".into(),
                format!(
                    "in a container: pass `--device /dev/infiniband`, `--cap-add IPC_LOCK` and `--ulimit memlock=-1` (spark-launch nccl-test does); on {}: load the drivers (`sudo modprobe mlx5_ib`) and check `ls /sys/class/infiniband`",
                    p.host
                ),
            ),
        };
    }
    if !p.ib_devices.is_empty() {
        return (
            format!(
                " although it saw RDMA devices ({})",
                p.ib_devices
                    .iter()
                    .map(|d| d.device.as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            ),
            "read the NCCL WARN lines of this run: a memlock limit (`--ulimit memlock=-1`), a missing `/dev/infiniband` or a port that is not ACTIVE makes NCCL give up on RDMA".into(),
        );
    }
    (
        String::new(),
        "run with NCCL_DEBUG=INFO and check the `NET/IB` lines; RDMA needs `/dev/infiniband`, IPC_LOCK and an unlimited memlock in the container, and an ACTIVE port (`spark-launch doctor`)".into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO_TWINS: &str = "\
spark-a:100:100 [0] NCCL INFO NCCL_IB_HCA set to rocep1s0f1,roceP2p1s0f1
spark-a:100:100 [0] NCCL INFO NET/IB : Using [0]rocep1s0f1:1/RoCE [1]roceP2p1s0f1:1/RoCE [RO]; OOB enp1s0f1np1:192.168.177.11<0>
spark-a:100:100 [0] NCCL INFO Using network IB
spark-a:100:100 [0] NCCL INFO comm 0x5 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0
spark-a:100:100 [0] NCCL INFO Channel 00/0 : 1[0] -> 0[0] [receive] via NET/IB/0/GDRDMA
spark-a:100:100 [0] NCCL INFO Channel 01/0 : 1[0] -> 0[0] [receive] via NET/IB/1/GDRDMA
";

    #[test]
    fn both_twins_in_use_is_rdma_without_problems() {
        let r = detect_transport(TWO_TWINS);
        assert_eq!(r.processes.len(), 1);
        let p = &r.processes[0];
        assert_eq!(p.transport, Transport::Rdma);
        assert_eq!(p.ranks, vec![0]);
        assert_eq!(p.nnodes, Some(2));
        assert!(p.gdr);
        assert_eq!(
            p.ib_devices[1],
            IbPort {
                index: 1,
                device: "roceP2p1s0f1".into(),
                port: 1,
                link: "RoCE".into()
            }
        );
        assert!(transport_problems(&r, &ExpectedHcas::new()).is_empty());
    }

    #[test]
    fn a_twin_missing_from_net_ib_is_a_failing_problem_naming_it() {
        let log = TWO_TWINS
            .replace(" [1]roceP2p1s0f1:1/RoCE", "")
            .replace("NET/IB/1/GDRDMA", "NET/IB/0/GDRDMA");
        let r = detect_transport(&log);
        let problems = transport_problems(&r, &ExpectedHcas::new());
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].kind, ProblemKind::MissingHca);
        assert!(problems[0].kind.fails());
        assert!(
            problems[0]
                .problem
                .what
                .contains("roceP2p1s0f1 carries no traffic")
        );
        assert!(
            problems[0]
                .problem
                .fix
                .contains("/sys/class/infiniband/roceP2p1s0f1/ports/1/state")
        );
    }

    #[test]
    fn the_expected_hcas_given_by_the_caller_win_over_the_log() {
        let log = TWO_TWINS.replace("NCCL_IB_HCA set to rocep1s0f1,roceP2p1s0f1", "x");
        let r = detect_transport(&log);
        let mut want = ExpectedHcas::new();
        want.insert(
            "spark-a".into(),
            vec![
                "rocep1s0f1".into(),
                "roceP2p1s0f1".into(),
                "rocep1s0f0".into(),
            ],
        );
        let problems = transport_problems(&r, &want);
        assert_eq!(problems.len(), 1);
        assert!(problems[0].problem.what.contains("rocep1s0f0 carries"));
    }

    #[test]
    fn channels_on_one_of_two_opened_devices_is_only_a_warning() {
        let log = TWO_TWINS.replace("NET/IB/1/GDRDMA", "NET/IB/0/GDRDMA");
        let problems = transport_problems(&detect_transport(&log), &ExpectedHcas::new());
        assert_eq!(problems.len(), 1);
        assert_eq!(problems[0].kind, ProblemKind::IdleHca);
        assert!(!problems[0].kind.fails());
    }

    #[test]
    fn using_network_socket_on_one_node_with_p2p_channels_is_not_a_fallback() {
        let log = "\
vm:1:1 [0] NCCL INFO Using network Socket
vm:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 1 localRanks 2 localRank 0 MNNVL 0
vm:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM
";
        let r = detect_transport(log);
        assert_eq!(r.processes[0].transport, Transport::IntraNode);
        assert!(!r.fell_back_to_sockets());
    }

    #[test]
    fn without_channel_lines_a_socket_network_across_nodes_is_still_a_fallback() {
        let log = "\
a:1:1 [0] NCCL INFO NET/IB : No device found.
a:1:1 [0] NCCL INFO Using network Socket
a:1:1 [0] NCCL INFO comm 0x1 rank 0 nRanks 2 nNodes 2 localRanks 1 localRank 0 MNNVL 0
";
        let r = detect_transport(log);
        assert_eq!(r.processes[0].transport, Transport::Socket);
        let problems = transport_problems(&r, &ExpectedHcas::new());
        assert_eq!(problems[0].kind, ProblemKind::SocketFallback);
        assert!(problems[0].problem.what.contains("found no RDMA device"));
        assert!(problems[0].problem.fix.contains("/dev/infiniband"));
    }

    #[test]
    fn ib_disabled_by_environment_is_named_as_the_cause() {
        let log = "\
a:1:1 [0] NCCL INFO NCCL_IB_DISABLE set by environment to 1.
a:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0
";
        let problems = transport_problems(&detect_transport(log), &ExpectedHcas::new());
        assert!(problems[0].problem.what.contains("NCCL_IB_DISABLE=1"));
    }

    #[test]
    fn a_merged_virtual_device_counts_both_twins_as_opened() {
        let log = "\
a:1:1 [0] NCCL INFO NCCL_IB_HCA set to rocep1s0f1,roceP2p1s0f1
a:1:1 [0] NCCL INFO NET/IB : Made virtual device [2] name=rocep1s0f1+roceP2p1s0f1 speed=200000 ndevs=2
a:1:1 [0] NCCL INFO NET/IB : Using [0]rocep1s0f1:1/RoCE [RO]; OOB x:1.2.3.4<0>
a:1:1 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/2
";
        let r = detect_transport(log);
        assert!(transport_problems(&r, &ExpectedHcas::new()).is_empty());
    }
}
