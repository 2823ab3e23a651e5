//! Reachability checks, judged from live observations: SSH without prompts from every node to
//! every other, every fabric address answering, and the ports the workloads need still free.
//!
//! Pure. When every node fails to reach the same peer, the finding goes to that peer (its sshd
//! or interface is the problem), not to each of the nodes that tried.

use std::collections::{BTreeMap, BTreeSet};

use super::check::*;
use super::live::CmdOut;
use super::{Check, Inputs, PortScope};
use crate::node::NodeName;

const fn info(id: &'static str, title: &'static str) -> CheckInfo {
    CheckInfo {
        id,
        category: Category::Reachability,
        needs: CheckNeeds::Live,
        title,
    }
}

pub const CHECKS: &[Check] = &[
    Check {
        info: info("reach.ssh", "SSH (BatchMode) node to node"),
        run: ssh,
    },
    Check {
        info: info("reach.fabric", "fabric addresses answer"),
        run: fabric,
    },
    Check {
        info: info("reach.ports", "workload ports free"),
        run: ports,
    },
];

/// One failed attempt from `from` to `to`.
struct Failure<'a> {
    from: &'a NodeName,
    to: &'a NodeName,
    what: String,
    result: &'a CmdOut,
}

/// Which sources tried to reach each target.
pub(super) type Tried<'a> = BTreeMap<&'a NodeName, BTreeSet<&'a NodeName>>;

/// Targets that every node which tried failed to reach (`failed`: `(from, to)` pairs), when at
/// least two tried (with only two nodes, either end may be at fault: each keeps its finding).
pub(super) fn blamed<'a>(
    failed: &[(&'a NodeName, &'a NodeName)],
    tried: &Tried<'a>,
) -> Vec<&'a NodeName> {
    tried
        .iter()
        .filter(|(to, from)| {
            let failed_from: BTreeSet<&NodeName> = failed
                .iter()
                .filter(|(_, t)| t == *to)
                .map(|(f, _)| *f)
                .collect();
            from.len() >= 2 && failed_from.len() == from.len()
        })
        .map(|(to, _)| *to)
        .collect()
}

fn pairs<'a>(failures: &[Failure<'a>]) -> Vec<(&'a NodeName, &'a NodeName)> {
    failures.iter().map(|f| (f.from, f.to)).collect()
}

fn ssh_fix(reason: &str, to: &NodeName) -> (&'static str, Fix) {
    let r = reason.to_lowercase();
    if r.contains("host key verification failed") || r.contains("host key") {
        (
            "the peer's host key is not known here, so a non-interactive SSH refuses to connect (and mpirun, Ray and image copies hang on a prompt)",
            Fix::run(
                "pin every node's host key on every node",
                ["spark-launch trust".to_string()],
            ),
        )
    } else if r.contains("permission denied") {
        (
            "this node's public key is not in the peer's authorized_keys; anything that SSHes between nodes (mpirun, image and model copies) fails",
            Fix::run(
                "authorise every node's key on every other node (public keys only)",
                ["spark-launch trust".to_string()],
            ),
        )
    } else if r.contains("connection refused") {
        (
            "nothing listens for SSH on the peer",
            Fix::run(
                format!("start sshd on {to}"),
                ["sudo systemctl enable --now ssh".to_string()],
            ),
        )
    } else {
        (
            "the peer cannot be reached over the network",
            Fix::text(format!(
                "check that {to} is up and on the network, and that no firewall drops port 22"
            )),
        )
    }
}

fn ssh(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    let mut failures = Vec::new();
    let mut tried = Tried::new();
    for (node, why) in inputs.unreachable {
        let (why_it_matters, fix) = ssh_fix(why, node);
        e.push(Finding::fail(
            node,
            format!("this machine cannot reach the node over SSH: {why}"),
            why_it_matters,
            fix,
        ));
    }
    for node in inputs.nodes {
        let obs = match inputs.observed(&node.name) {
            Ok(o) => o,
            Err(why) => {
                e.push(Finding::fail(
                    &node.name,
                    format!("doctor could not run its checks on this node: {why}"),
                    "every command spark-launch runs on a node goes through this SSH connection",
                    Fix::run(
                        "make sure the node is up, sshd runs and this machine's key is authorised there",
                        ["spark-launch trust".to_string()],
                    ),
                ));
                continue;
            }
        };
        for s in &obs.ssh {
            tried.entry(&s.target.peer).or_default().insert(&node.name);
            let Some(r) = &s.result else { continue };
            if !r.ok() {
                failures.push(Failure {
                    from: &node.name,
                    to: &s.target.peer,
                    what: s.target.destination.clone(),
                    result: r,
                });
            }
        }
    }
    // A node whose own gathering failed did not try; count those that did.
    let blamed = blamed(&pairs(&failures), &tried);
    for to in &blamed {
        let from: Vec<&str> = failures
            .iter()
            .filter(|f| f.to == *to)
            .map(|f| f.from.as_str())
            .collect();
        let reason = failures
            .iter()
            .find(|f| f.to == *to)
            .map(|f| f.result.reason())
            .unwrap_or_default();
        let (why, fix) = ssh_fix(&reason, to);
        e.push(Finding::fail(
            to,
            format!(
                "no node can SSH to this node non-interactively (from {}: {reason})",
                from.join(", ")
            ),
            why,
            fix,
        ));
    }
    for f in failures.iter().filter(|f| !blamed.contains(&f.to)) {
        let reason = f.result.reason();
        let (why, fix) = ssh_fix(&reason, f.to);
        e.push(Finding::fail(
            f.from,
            format!(
                "`ssh -o BatchMode=yes {}` to {} fails: {reason}",
                f.what, f.to
            ),
            why,
            fix,
        ));
    }
    e
}

fn fabric(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    let mut failures = Vec::new();
    let mut tried = Tried::new();
    for (node, obs) in inputs.observed_nodes(&mut e) {
        for p in obs.pings.iter().filter(|p| p.ping.df_payload.is_none()) {
            tried.entry(&p.ping.peer).or_default().insert(&node.name);
            let Some(r) = &p.result else { continue };
            if !r.ok() {
                failures.push(Failure {
                    from: &node.name,
                    to: &p.ping.peer,
                    what: format!("{} from {}", p.ping.to, p.ping.iface),
                    result: r,
                });
            }
        }
        if obs.pings.is_empty() && inputs.nodes.len() > 1 {
            e.note(&node.name, "no peer shares a fabric subnet with this node");
        }
    }
    let blamed = blamed(&pairs(&failures), &tried);
    let why = "NCCL's bootstrap, Gloo and Ray connect over these addresses: a silent peer makes the job hang at start";
    for to in &blamed {
        let what: Vec<String> = failures
            .iter()
            .filter(|f| f.to == *to)
            .map(|f| format!("{} ({})", f.what, f.from))
            .collect();
        e.push(Finding::fail(
            to,
            format!(
                "no node gets an answer from this node's fabric address: {}",
                what.join(", ")
            ),
            why,
            Fix::text(
                "check that the fabric interface is up with its address (`ip -br addr`), the cable is seated, and no firewall drops ICMP on it",
            ),
        ));
    }
    // A silent node's own pings out fail for the same reason: already said.
    for f in failures
        .iter()
        .filter(|f| !blamed.contains(&f.to) && !blamed.contains(&f.from))
    {
        e.push(Finding::fail(
            f.from,
            format!(
                "ping {} to {} gets no answer: {}",
                f.what,
                f.to,
                f.result.reason()
            ),
            why,
            Fix::text(format!(
                "check both ends' addresses and cabling (`ip -br addr` on this node and on {}); a firewall must not drop traffic on fabric interfaces",
                f.to
            )),
        ));
    }
    e
}

fn ports(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    let head = inputs.head().map(|h| &h.name);
    for (node, obs) in inputs.observed_nodes(&mut e) {
        let Some(listening) = &obs.listening else {
            e.skip(&node.name, "/proc/net/tcp could not be read");
            continue;
        };
        for p in &inputs.options.ports {
            if p.scope == PortScope::Head && Some(&node.name) != head {
                continue;
            }
            if p.last > p.port {
                range_taken(&mut e, &node.name, p, listening);
            } else if listening.contains(&p.port) {
                e.push(Finding::fail(
                    &node.name,
                    format!("port {} ({}) is already in use", p.port, p.what),
                    "the workload cannot bind it and fails at start, or worse, its peers connect to whatever holds it",
                    Fix::run(
                        format!(
                            "find what listens there and stop it (a leftover spark-launch job shows in `spark-launch status`), or choose another port for {}",
                            p.what
                        ),
                        [format!("sudo ss -ltnp 'sport = :{}'", p.port)],
                    ),
                ));
            }
        }
    }
    e
}

/// Ports taken inside a range a workload picks from (Ray's workers): a warning, since the
/// workload takes the others, but a worker handed a taken one fails to start.
fn range_taken(
    e: &mut Evaluation,
    node: &crate::node::NodeName,
    p: &super::PortUse,
    listening: &std::collections::BTreeSet<u16>,
) {
    let taken: Vec<String> = listening
        .range(p.port..=p.last)
        .map(|x| x.to_string())
        .collect();
    if taken.is_empty() {
        return;
    }
    e.push(Finding::warn(
        node,
        format!(
            "port{} {} of the {} ({}–{}) {} already in use",
            if taken.len() == 1 { "" } else { "s" },
            taken.join(", "),
            p.what,
            p.port,
            p.last,
            if taken.len() == 1 { "is" } else { "are" }
        ),
        "the workload hands ports of this range to its processes; one handed a taken port fails to start",
        Fix::run(
            "find what listens there and move it out of the range, or stop it",
            [format!(
                "sudo ss -ltnp '( sport >= :{} and sport <= :{} )'",
                p.port, p.last
            )],
        ),
    ));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Options;
    use crate::doctor::testkit::*;

    #[test]
    fn ssh_passes_when_every_node_reaches_every_other() {
        let (nodes, live) = three(|_, _| {});
        let e = live_eval("reach.ssh", &nodes, &Options::default(), &live);
        assert!(e.findings.is_empty());
    }

    #[test]
    fn ssh_down_on_one_node_is_blamed_on_that_node_only() {
        let (nodes, mut live) = three(|_, o| {
            for s in &mut o.ssh {
                if s.target.peer.as_str() == "c" {
                    s.result = out(255, "ssh: connect to host c port 22: Connection refused");
                }
            }
        });
        live.insert(
            name("c"),
            Err("ssh: connect to host c port 22: Connection refused".into()),
        );
        let e = live_eval("reach.ssh", &nodes, &Options::default(), &live);
        assert_eq!(
            verdicts(&e),
            vec![("c".into(), Severity::Fail), ("c".into(), Severity::Fail)]
        );
        assert!(
            e.findings
                .iter()
                .any(|f| f.problem.fix.commands == vec!["sudo systemctl enable --now ssh"])
        );
    }

    #[test]
    fn a_missing_key_fails_on_the_node_that_cannot_log_in_with_trust_as_the_fix() {
        let (nodes, live) = three(|n, o| {
            if n.as_str() == "b" {
                o.ssh[0].result = out(255, "a@a: Permission denied (publickey).");
            }
        });
        let e = live_eval("reach.ssh", &nodes, &Options::default(), &live);
        assert_eq!(verdicts(&e), vec![("b".into(), Severity::Fail)]);
        assert_eq!(
            e.findings[0].problem.fix.commands,
            vec!["spark-launch trust"]
        );
        assert!(
            e.findings[0]
                .problem
                .what
                .contains("Permission denied (publickey)")
        );
    }

    #[test]
    fn fabric_passes_when_every_address_answers_and_blames_the_silent_node() {
        let (nodes, live) = three(|_, _| {});
        assert!(
            live_eval("reach.fabric", &nodes, &Options::default(), &live)
                .findings
                .is_empty()
        );
        let (nodes, live) = three(|_, o| {
            for p in &mut o.pings {
                if p.ping.to.to_string() == "10.9.0.2" {
                    p.result = out(1, "");
                }
            }
        });
        let e = live_eval("reach.fabric", &nodes, &Options::default(), &live);
        assert_eq!(verdicts(&e), vec![("b".into(), Severity::Fail)]);
    }

    #[test]
    fn ports_fail_where_a_head_port_is_taken_and_ignore_it_on_workers() {
        let (nodes, live) = three(|_, _| {});
        assert!(
            live_eval("reach.ports", &nodes, &Options::default(), &live)
                .findings
                .is_empty()
        );
        let (nodes, live) = three(|n, o| {
            let taken = if n.as_str() == "a" { 8000 } else { 6379 };
            o.listening.as_mut().unwrap().insert(taken);
            if n.as_str() == "c" {
                o.listening.as_mut().unwrap().insert(2233);
            }
        });
        let e = live_eval("reach.ports", &nodes, &Options::default(), &live);
        assert_eq!(
            verdicts(&e),
            vec![("a".into(), Severity::Fail), ("c".into(), Severity::Fail)]
        );
        assert_eq!(
            e.findings[0].problem.what,
            "port 8000 (vLLM API server) is already in use"
        );
        assert_eq!(
            e.findings[1].problem.fix.commands,
            vec!["sudo ss -ltnp 'sport = :2233'"]
        );
    }

    #[test]
    fn the_rendezvous_each_engine_really_binds_is_checked() {
        // vLLM's is 29501 (not torch's 29500); 29500 is Atlas's own.
        let (nodes, live) = three(|n, o| {
            if n.as_str() == "a" {
                o.listening.as_mut().unwrap().extend([29500, 29501]);
            }
        });
        let e = live_eval("reach.ports", &nodes, &Options::default(), &live);
        let problems: Vec<&str> = e.findings.iter().map(|f| f.problem.what.as_str()).collect();
        assert_eq!(
            problems,
            vec![
                "port 29501 (torch.distributed rendezvous (vLLM --master-port)) is already in use",
                "port 29500 (NCCL bootstrap (Atlas --master-port)) is already in use",
            ]
        );
    }

    #[test]
    fn a_taken_port_in_ray_s_worker_range_is_a_warning_on_that_node() {
        use crate::workload::engines::{EngineKind, EngineOptions};
        let ray = EngineOptions {
            ray: true,
            ..EngineOptions::default()
        };
        let options = Options {
            ports: crate::doctor::serving_ports(EngineKind::Vllm, &ray, 8000, 3),
            ..Options::default()
        };
        let (nodes, live) = three(|n, o| {
            if n.as_str() == "b" {
                o.listening.as_mut().unwrap().extend([10500, 10501, 20000]);
            }
        });
        let e = live_eval("reach.ports", &nodes, &options, &live);
        assert_eq!(verdicts(&e), vec![("b".into(), Severity::Warn)]);
        assert_eq!(
            e.findings[0].problem.what,
            "ports 10500, 10501 of the Ray worker ports (10002–19999) are already in use"
        );
    }
}
