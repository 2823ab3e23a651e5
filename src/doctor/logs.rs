//! Last-run analysers (`doctor --log FILE`): read a saved nccl-tests, vLLM or Ray log and name
//! the cause of the known silent failures — NCCL on TCP sockets, `ibv_modify_qp ... 110` QP
//! timeouts (GID index or subnet mismatch), `DistStoreError` rendezvous timeouts, Ray/vLLM
//! "unique IP" errors — with the lines that prove it and the fix.
//!
//! Pure functions of text. Each analyser has a stable id (`lastrun.qp-timeout`) like the node
//! checks, and says "ok" when the log shows nothing of its kind. The transport (sockets or
//! RDMA, and which HCAs NCCL really opened) is read by `report::nccl`'s transport detection,
//! the same code `nccl-test` judges its runs with; the other analysers are here.

use std::net::Ipv6Addr;

use serde::Serialize;

use super::check::{CheckStatus, Fix, Severity};
use crate::problem::Problem;
use crate::report::nccl::{ExpectedHcas, ProblemKind, detect_transport, transport_problems};

/// A line of the log that shows the problem (1-based line number).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Evidence {
    pub line: usize,
    pub text: String,
}

/// What an analyser found: the problem, its cause and why it matters (the problem's `why`,
/// written `cause` in JSON), the fix, the proof.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogFinding {
    pub severity: Severity,
    pub problem: Problem<Fix>,
    pub evidence: Vec<Evidence>,
}

impl Serialize for LogFinding {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        struct Json<'a> {
            severity: Severity,
            problem: &'a str,
            cause: &'a str,
            fix: &'a Fix,
            evidence: &'a [Evidence],
        }
        Json {
            severity: self.severity,
            problem: &self.problem.what,
            cause: &self.problem.why,
            fix: &self.problem.fix,
            evidence: &self.evidence,
        }
        .serialize(s)
    }
}

/// One analyser's verdict on one log.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LogResult {
    pub id: &'static str,
    pub title: &'static str,
    pub status: CheckStatus,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finding: Option<LogFinding>,
    /// Why the analyser could not judge this log.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub skipped: Option<String>,
}

/// Every analyser's verdict on one log file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LogReport {
    pub file: String,
    pub results: Vec<LogResult>,
}

impl LogReport {
    pub fn status(&self) -> CheckStatus {
        self.results
            .iter()
            .map(|r| r.status)
            .filter(|s| *s != CheckStatus::Skipped)
            .max()
            .unwrap_or(CheckStatus::Ok)
    }
}

enum Verdict {
    Clean,
    NotApplicable(String),
    Found(LogFinding),
}

/// One log as the analysers see it: the whole text and its lines.
struct Log<'a> {
    text: &'a str,
    lines: Vec<&'a str>,
}

struct Analyser {
    id: &'static str,
    title: &'static str,
    run: fn(&Log) -> Verdict,
}

const ANALYSERS: &[Analyser] = &[
    Analyser {
        id: "lastrun.net-socket",
        title: "NCCL used RDMA, not TCP sockets",
        run: net_socket,
    },
    Analyser {
        id: "lastrun.missing-hca",
        title: "NCCL opened every HCA it was given (twins)",
        run: missing_hca,
    },
    Analyser {
        id: "lastrun.qp-timeout",
        title: "no ibv_modify_qp timeouts (GID / subnet)",
        run: qp_timeout,
    },
    Analyser {
        id: "lastrun.rendezvous",
        title: "rendezvous completed (DistStoreError)",
        run: rendezvous,
    },
    Analyser {
        id: "lastrun.ray-ip",
        title: "one IP per node (Ray / vLLM)",
        run: ray_ip,
    },
];

/// The ids of every analyser, in report order.
pub fn ids() -> Vec<&'static str> {
    ANALYSERS.iter().map(|a| a.id).collect()
}

/// Runs every analyser on one log.
pub fn analyse(file: &str, text: &str) -> LogReport {
    // A log is foreign text: what a finding quotes of it is printable (control characters
    // escaped), never raw.
    let text = &crate::text::printable_lines(text);
    let log = Log {
        text,
        lines: text.lines().collect(),
    };
    let results = ANALYSERS
        .iter()
        .map(|a| {
            let (status, finding, skipped) = match (a.run)(&log) {
                Verdict::Clean => (CheckStatus::Ok, None, None),
                Verdict::NotApplicable(why) => (CheckStatus::Skipped, None, Some(why)),
                Verdict::Found(f) => (f.severity.into(), Some(f), None),
            };
            LogResult {
                id: a.id,
                title: a.title,
                status,
                finding,
                skipped,
            }
        })
        .collect();
    LogReport {
        file: file.to_string(),
        results,
    }
}

/// Lines matching `pred`, first three as evidence, with the total count.
fn evidence(lines: &[&str], pred: impl Fn(&str) -> bool) -> (Vec<Evidence>, usize) {
    let hits: Vec<Evidence> = lines
        .iter()
        .enumerate()
        .filter(|(_, l)| pred(l))
        .map(|(i, l)| Evidence {
            line: i + 1,
            text: l.trim_end().to_string(),
        })
        .collect();
    let n = hits.len();
    (hits.into_iter().take(3).collect(), n)
}

fn find<'a>(lines: &[&'a str], needle: &str) -> Option<&'a str> {
    lines.iter().copied().find(|l| l.contains(needle))
}

/// `host (ranks)` for every problem, joined.
fn where_(problems: &[crate::report::nccl::TransportProblem]) -> String {
    problems
        .iter()
        .map(|p| format!("{} ({})", p.host, p.ranks))
        .collect::<Vec<_>>()
        .join(", ")
}

const NO_NCCL_LINES: &str = "no NCCL INFO lines: run with NCCL_DEBUG=INFO to see the transport";

fn net_socket(log: &Log) -> Verdict {
    let transport = detect_transport(log.text);
    if transport.is_empty() {
        return Verdict::NotApplicable(NO_NCCL_LINES.into());
    }
    let problems: Vec<_> = transport_problems(&transport, &ExpectedHcas::new())
        .into_iter()
        .filter(|p| p.kind == ProblemKind::SocketFallback)
        .collect();
    let Some(first) = problems.first() else {
        return Verdict::Clean;
    };
    let (evidence, _) = evidence(&log.lines, |l| {
        l.contains("via NET/Socket") || l.contains("Using network Socket")
    });
    Verdict::Found(LogFinding {
        severity: Severity::Fail,
        problem: Problem::with_fix(
            format!(
                "NCCL ran over TCP sockets (NET/Socket) on {}",
                where_(&problems)
            ),
            Fix::from_prose(&first.problem.fix),
        )
        .because(first.problem.what.clone()),
        evidence,
    })
}

fn missing_hca(log: &Log) -> Verdict {
    let transport = detect_transport(log.text);
    if transport.is_empty() {
        return Verdict::NotApplicable(NO_NCCL_LINES.into());
    }
    let problems: Vec<_> = transport_problems(&transport, &ExpectedHcas::new())
        .into_iter()
        .filter(|p| matches!(p.kind, ProblemKind::MissingHca | ProblemKind::IdleHca))
        .collect();
    let Some(first) = problems.first() else {
        return Verdict::Clean;
    };
    let (evidence, _) = evidence(&log.lines, |l| {
        l.contains("NET/IB : Using") || l.contains("NCCL_IB_HCA set")
    });
    let fails = problems.iter().any(|p| p.kind.fails());
    Verdict::Found(LogFinding {
        severity: if fails {
            Severity::Fail
        } else {
            Severity::Warn
        },
        problem: Problem::with_fix(
            format!(
                "NCCL used fewer RDMA devices than it was given on {}",
                where_(&problems)
            ),
            Fix::from_prose(&first.problem.fix),
        )
        .because(first.problem.what.clone()),
        evidence,
    })
}

/// `local GID index N, local GID X, remote GID Y` from NCCL's modify-QP message.
fn qp_gids(line: &str) -> Option<(Option<u32>, Ipv6Addr, Ipv6Addr)> {
    let field = |name: &str| {
        let (_, rest) = line.split_once(name)?;
        Some(rest.split([',', ' ']).next()?.trim().to_string())
    };
    let index = field("local GID index ").and_then(|s| s.parse().ok());
    let local = line
        .match_indices("local GID ")
        .filter_map(|(i, m)| {
            let v = line[i + m.len()..].split([',', ' ']).next()?;
            (v != "index").then_some(v)
        })
        .next()?
        .parse()
        .ok()?;
    let remote = field("remote GID ")?.parse().ok()?;
    Some((index, local, remote))
}

fn qp_timeout(log: &Log) -> Verdict {
    let lines = &log.lines;
    let is_timeout = |l: &str| {
        l.contains("ibv_modify_qp")
            && (l.contains("failed with 110") || l.contains("Connection timed out"))
    };
    let (ev, n) = evidence(lines, is_timeout);
    if n == 0 {
        return Verdict::Clean;
    }
    let detail = lines
        .iter()
        .filter(|l| is_timeout(l))
        .find_map(|l| qp_gids(l));
    let generic_fix = || {
        Fix::text(
            "let spark-launch derive NCCL_IB_HCA and NCCL_IB_GID_INDEX per node (`spark-launch env`), and run `spark-launch doctor` for the fabric: every cabled device ACTIVE, distinct subnets per twin, same MTU on both ends",
        )
    };
    let (cause, fix) = match detail {
        Some((index, local, remote)) => {
            let v4 = |g: Ipv6Addr| g.to_ipv4_mapped();
            match (v4(local), v4(remote)) {
                (Some(a), Some(b)) if a.octets()[..3] != b.octets()[..3] => (
                    format!(
                        "the QP paired GIDs on different subnets ({a} here, {b} at the peer): the two HCAs NCCL matched are not on one link (a ring without subnet-aware routing, or a twin whose address is on another cable's subnet)"
                    ),
                    Fix::text(
                        "for rings and meshes set NCCL_IB_SUBNET_AWARE_ROUTING=1 NCCL_NET_PLUGIN=none NCCL_IB_MERGE_NICS=0 (spark-launch env does); otherwise give both ends of each cable addresses on one subnet",
                    ),
                ),
                (Some(a), Some(b)) => (
                    format!(
                        "both GIDs are on one subnet ({a} and {b}) yet the connection timed out: RoCE frames are dropped on the link (MTU differing between the ends, a twin down, or a firewall/PFC setting)"
                    ),
                    generic_fix(),
                ),
                _ => (
                    format!(
                        "the QP used GID index {} whose GID is not an IPv4 RoCE v2 GID ({local} here, {remote} at the peer): NCCL_IB_GID_INDEX points at the wrong entry on at least one node",
                        index.map(|i| i.to_string()).unwrap_or_else(|| "?".into())
                    ),
                    Fix::text(
                        "unset a hand-set NCCL_IB_GID_INDEX (and remove it from /etc/nccl.conf); spark-launch sets it only where every HCA has its RoCE v2 IPv4 GID at one index",
                    ),
                ),
            }
        }
        None => (
            "RDMA queue pairs could not connect (ETIMEDOUT): a GID index that does not exist on the peer, or HCAs on different subnets".to_string(),
            generic_fix(),
        ),
    };
    Verdict::Found(LogFinding {
        severity: Severity::Fail,
        problem: Problem::with_fix(
            format!(
                "ibv_modify_qp timed out (errno 110) {n} time{}",
                if n == 1 { "" } else { "s" }
            ),
            fix,
        )
        .because(cause),
        evidence: ev,
    })
}

/// `(host, port)` from `... while trying to connect to (HOST, PORT)`.
fn connect_target(line: &str) -> Option<(String, String)> {
    let (_, rest) = line.split_once("trying to connect to (")?;
    let inner = rest.split(')').next()?;
    let (h, p) = inner.split_once(',')?;
    Some((h.trim().to_string(), p.trim().to_string()))
}

fn rendezvous(log: &Log) -> Verdict {
    let lines = &log.lines;
    let is_store = |l: &str| {
        l.contains("DistStoreError")
            || l.contains("clients joined")
            || l.contains("The client socket has timed out after")
            || (l.contains("server socket has failed to listen") && l.contains("EADDRINUSE"))
            || l.contains("DistNetworkError")
    };
    let (ev, n) = evidence(lines, is_store);
    if n == 0 {
        return Verdict::Clean;
    }
    let fix_reach = |what: &str| {
        Fix::text(format!(
            "{what}; MASTER_ADDR must be the head's fabric address (`spark-launch env` MASTER_ADDR), the port free and reachable from every worker (`spark-launch doctor --check reach`), and all ranks started together"
        ))
    };
    let (problem, cause, fix) = if let Some(l) = lines
        .iter()
        .find(|l| l.contains("failed to listen") && l.contains("EADDRINUSE"))
    {
        (
            "the rendezvous store could not listen: its port is in use".to_string(),
            format!(
                "another process holds the port (`{}`) — often a rank of an earlier run still alive",
                l.trim()
            ),
            Fix::text(
                "stop leftover ranks (`spark-launch status`, `spark-launch stop JOB`) or pick another MASTER_PORT; `spark-launch doctor --check reach.ports` shows taken ports",
            ),
        )
    } else if let Some((host, port)) = lines.iter().find_map(|l| connect_target(l)) {
        let cause = if host == "localhost" || host.starts_with("127.") || host == "::1" {
            format!(
                "the rank tried the rendezvous at {host}:{port}: MASTER_ADDR is a loopback address, which on a multi-node run points every worker at itself"
            )
        } else if host.starts_with("172.17.") {
            format!(
                "the rank tried {host}:{port}, a Docker bridge address that exists only inside one node: the containers do not run with --network host"
            )
        } else {
            format!(
                "this rank could not connect to the rendezvous at {host}:{port}: the head is not listening there (crashed, or not started yet), the address is not reachable from this node, or a firewall drops the port"
            )
        };
        (
            format!("a rank timed out connecting to the rendezvous store at {host}:{port}"),
            cause,
            fix_reach("check the head's log first: the store lives in its rank 0"),
        )
    } else if let Some((joined, total)) = lines.iter().find_map(|l| clients_joined(l)) {
        (
            format!("the rendezvous timed out: only {joined} of {total} ranks joined"),
            format!(
                "{} rank{} never reached the store on MASTER_ADDR:MASTER_PORT — the worker failed before joining (see its log), or it cannot reach the head's address",
                total.saturating_sub(joined),
                if total.saturating_sub(joined) == 1 {
                    ""
                } else {
                    "s"
                }
            ),
            fix_reach("look at the missing workers' logs for the first error"),
        )
    } else {
        (
            "torch.distributed's rendezvous failed (DistStoreError)".to_string(),
            "the ranks could not meet at MASTER_ADDR:MASTER_PORT".to_string(),
            fix_reach("check every rank's log for the first error"),
        )
    };
    Verdict::Found(LogFinding {
        severity: Severity::Fail,
        problem: Problem::with_fix(problem, fix).because(cause),
        evidence: ev,
    })
}

/// `X/Y clients joined` → (X, Y).
fn clients_joined(line: &str) -> Option<(u32, u32)> {
    let (before, _) = line.split_once(" clients joined")?;
    let frac = before.rsplit(' ').next()?;
    let (a, b) = frac.split_once('/')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}

fn ray_ip(log: &Log) -> Verdict {
    let lines = &log.lines;
    let is_ip = |l: &str| {
        l.contains("Every node should have a unique IP address")
            || l.contains("and Ray expects this IP address to be")
    };
    let (ev, n) = evidence(lines, is_ip);
    if n == 0 {
        return Verdict::Clean;
    }
    let fix = Fix::text(
        "give every node its own fabric address in VLLM_HOST_IP, RAY_NODE_IP_ADDRESS and `ray start --node-ip-address` (`spark-launch env` derives them per node; `spark-launch vllm --ray` sets them), and run the containers with --network host",
    );
    let cause = if let Some(l) = find(lines, "Every node should have a unique IP address") {
        match unique_ip_counts(l) {
            Some((nodes, ips, set)) if ips < nodes => format!(
                "{nodes} Ray nodes reported only {ips} distinct IP{} ({set}): two nodes registered under one address — VLLM_HOST_IP copied from the head to a worker, or containers on a Docker bridge that each see the same 172.17.x address",
                if ips == 1 { "" } else { "s" }
            ),
            Some((nodes, ips, set)) => format!(
                "{nodes} Ray nodes but {ips} IPs ({set}): a node's workers registered under a different address than its Ray node — Ray bound one interface (e.g. Wi-Fi or management) and VLLM_HOST_IP another"
            ),
            None => {
                "the Ray nodes and vLLM's workers disagree about which IP each node has".to_string()
            }
        }
    } else {
        "Ray on this node picked an IP that is neither the GCS address nor a registered raylet: it chose another interface than the one the cluster was started on".to_string()
    };
    Verdict::Found(LogFinding {
        severity: Severity::Fail,
        problem: Problem::with_fix(
            "Ray/vLLM refused the cluster: node IPs are not one per node".to_string(),
            fix,
        )
        .because(cause),
        evidence: ev,
    })
}

/// From vLLM's "Got N nodes with node ids [...] and M unique IP addresses {...}".
fn unique_ip_counts(line: &str) -> Option<(u32, u32, String)> {
    let (_, rest) = line.split_once("Got ")?;
    let nodes: u32 = rest.split_whitespace().next()?.parse().ok()?;
    let (_, rest) = rest.split_once("] and ")?;
    let ips: u32 = rest.split_whitespace().next()?.parse().ok()?;
    let set = rest
        .split_once('{')
        .and_then(|(_, s)| s.split_once('}'))
        .map(|(s, _)| s.replace('\'', ""))
        .unwrap_or_default();
    Some((nodes, ips, set))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(dir: &str, name: &str) -> String {
        let p = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(dir)
            .join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
    }

    /// A log of `tests/fixtures/logs/` (this module's).
    fn fixture(name: &str) -> String {
        read("logs", name)
    }

    /// An nccl-tests log of `tests/fixtures/nccl-tests/` (shared with `report::nccl`).
    fn nccl(name: &str) -> String {
        read("nccl-tests", name)
    }

    fn result<'a>(r: &'a LogReport, id: &str) -> &'a LogResult {
        r.results.iter().find(|x| x.id == id).unwrap()
    }

    #[test]
    fn a_socket_run_fails_net_socket_naming_the_missing_device() {
        let r = analyse("socket.log", &nccl("all_reduce_2rank_net_socket.log"));
        let x = result(&r, "lastrun.net-socket");
        assert_eq!(x.status, CheckStatus::Fail);
        let f = x.finding.as_ref().unwrap();
        assert_eq!(
            f.problem.what,
            "NCCL ran over TCP sockets (NET/Socket) on vm (ranks 0,1)"
        );
        assert!(
            f.problem.why.contains("NCCL found no RDMA device"),
            "{}",
            f.problem.why
        );
        assert!(
            f.evidence[0].text.contains("Using network Socket"),
            "{:?}",
            f.evidence
        );
        assert_eq!(r.status(), CheckStatus::Fail);
    }

    #[test]
    fn a_run_with_ib_disabled_names_the_variable() {
        let r = analyse("s.log", &nccl("gpu_h200x2_all_reduce_socket_plain.log"));
        let f = result(&r, "lastrun.net-socket").finding.clone().unwrap();
        assert!(
            f.problem.why.contains("NCCL_IB_DISABLE=1"),
            "{}",
            f.problem.why
        );
    }

    #[test]
    fn a_single_node_nvlink_run_is_not_mistaken_for_a_socket_fallback() {
        let r = analyse("nvlink.log", &nccl("all_reduce_2gpu_nvlink.log"));
        assert_eq!(result(&r, "lastrun.net-socket").status, CheckStatus::Ok);
    }

    #[test]
    fn an_rdma_run_on_both_twins_passes_every_analyser() {
        let r = analyse("ib.log", &nccl("all_gather_2spark_both_twins.log"));
        assert!(
            r.results.iter().all(|x| x.status == CheckStatus::Ok),
            "{r:#?}"
        );
    }

    #[test]
    fn a_run_that_opened_one_twin_of_two_fails_missing_hca() {
        let r = analyse("one.log", &nccl("all_gather_2spark_one_twin.log"));
        assert_eq!(result(&r, "lastrun.net-socket").status, CheckStatus::Ok);
        let x = result(&r, "lastrun.missing-hca");
        assert_eq!(x.status, CheckStatus::Fail);
        let f = x.finding.as_ref().unwrap();
        assert!(
            f.problem
                .what
                .starts_with("NCCL used fewer RDMA devices than it was given on spark-1b3b"),
            "{}",
            f.problem.what
        );
        assert!(f.problem.why.contains("roceP2p1s0f1"), "{}", f.problem.why);
    }

    #[test]
    fn a_log_without_nccl_info_lines_cannot_say_the_transport() {
        let r = analyse(
            "vllm.log",
            "INFO 11-20 10:00:00 api_server.py:1 vLLM API server version 0.11.0\n",
        );
        assert_eq!(
            result(&r, "lastrun.net-socket").status,
            CheckStatus::Skipped
        );
        assert_eq!(r.status(), CheckStatus::Ok);
    }

    #[test]
    fn a_qp_timeout_across_subnets_is_named_a_subnet_mismatch() {
        let r = analyse("qp.log", &fixture("nccl-qp-timeout-subnets.log"));
        let f = result(&r, "lastrun.qp-timeout").finding.clone().unwrap();
        assert!(f.problem.why.starts_with("the QP paired GIDs on different subnets (192.168.100.2 here, 192.168.101.3 at the peer)"), "{}", f.problem.why);
        assert!(
            f.problem
                .fix
                .text
                .contains("NCCL_IB_SUBNET_AWARE_ROUTING=1")
        );
        assert_eq!(f.evidence[0].line, 4);
    }

    #[test]
    fn a_qp_timeout_on_a_link_local_gid_blames_the_gid_index() {
        let line = "spark:1:1 [0] NCCL WARN Call to ibv_modify_qp failed with 110 Connection timed out, on dev rocep1s0f1:1, curr state INIT, next state RTR, local GID index 1, local GID fe80::5e25:73ff:fe00:1, remote GID ::ffff:192.168.177.12";
        let r = analyse("qp.log", line);
        let f = result(&r, "lastrun.qp-timeout").finding.clone().unwrap();
        assert!(
            f.problem
                .why
                .contains("NCCL_IB_GID_INDEX points at the wrong entry"),
            "{}",
            f.problem.why
        );
        // An older NCCL only says "with error Connection timed out".
        let old =
            "x:1:1 [0] NCCL WARN Call to ibv_modify_qp failed with error Connection timed out";
        let f = result(&analyse("old.log", old), "lastrun.qp-timeout")
            .finding
            .clone()
            .unwrap();
        assert!(
            f.problem
                .why
                .starts_with("RDMA queue pairs could not connect")
        );
    }

    #[test]
    fn a_rendezvous_timeout_counts_the_missing_ranks() {
        let r = analyse("store.log", &fixture("torch-diststoreerror-store.log"));
        let f = result(&r, "lastrun.rendezvous").finding.clone().unwrap();
        assert_eq!(
            f.problem.what,
            "the rendezvous timed out: only 1 of 2 ranks joined"
        );
        assert!(f.problem.why.starts_with("1 rank never reached the store"));
        assert_eq!(f.evidence[0].line, 4);
    }

    #[test]
    fn a_worker_that_cannot_connect_to_a_loopback_master_is_told_so() {
        let r = analyse("client.log", &fixture("torch-client-timeout.log"));
        let f = result(&r, "lastrun.rendezvous").finding.clone().unwrap();
        assert_eq!(
            f.problem.what,
            "a rank timed out connecting to the rendezvous store at 127.0.0.1:29512"
        );
        assert!(
            f.problem.why.contains("MASTER_ADDR is a loopback address"),
            "{}",
            f.problem.why
        );
        let line = "[c10d] The client socket has timed out after 600000ms while trying to connect to (10.0.0.11, 29500).";
        let f = result(&analyse("w.log", line), "lastrun.rendezvous")
            .finding
            .clone()
            .unwrap();
        assert!(
            f.problem
                .why
                .starts_with("this rank could not connect to the rendezvous at 10.0.0.11:29500")
        );
    }

    #[test]
    fn a_store_that_cannot_listen_names_the_taken_port() {
        let r = analyse("busy.log", &fixture("torch-eaddrinuse.log"));
        let f = result(&r, "lastrun.rendezvous").finding.clone().unwrap();
        assert_eq!(
            f.problem.what,
            "the rendezvous store could not listen: its port is in use"
        );
    }

    #[test]
    fn a_duplicate_ray_ip_is_named_with_the_addresses() {
        let r = analyse("ray.log", &fixture("vllm-ray-unique-ip.log"));
        let f = result(&r, "lastrun.ray-ip").finding.clone().unwrap();
        assert!(
            f.problem
                .why
                .starts_with("2 Ray nodes reported only 1 distinct IP (172.17.0.2)"),
            "{}",
            f.problem.why
        );
        let ray = "RuntimeError: This node has an IP address of 192.168.1.20, and Ray expects this IP address to be either the GCS address or one of the Raylet addresses.";
        let f = result(&analyse("r.log", ray), "lastrun.ray-ip")
            .finding
            .clone()
            .unwrap();
        assert!(f.problem.why.starts_with("Ray on this node picked an IP"));
    }

    #[test]
    fn clean_text_passes_every_analyser_that_applies() {
        let r = analyse("x.log", "hello\n");
        assert_eq!(r.status(), CheckStatus::Ok);
        assert_eq!(ids().len(), r.results.len());
    }
}
