//! What `fabric test` runs: perftest's `ib_write_bw` over every twin pair of the addressed
//! fabric, cable by cable, both twins of a cable at once (one server per twin on one end, one
//! client per twin on the other, as NVIDIA's benchmarking guide does), and what each twin pair
//! may carry. Pure: facts in, a [`TestPlan`] and its two scripts out; `fabric_apply::perftest` runs
//! them and `report::perftest` reads and judges the output.
//!
//! Cables run one after another: a Spark's two ports share one pair of PCIe links, so two
//! cables of one node measured at once would halve each other.

use std::net::Ipv4Addr;

use serde::Serialize;

use super::cabling::{self, Layout, twin_netdev};
use super::script::sq;
use super::{FabricRefusal, LinkArgError};
use crate::derive::NodeInput;
use crate::node::NodeName;
use crate::probe::facts::{IbDevice, NodeFacts};
use crate::probe::links::{End, LinkArg};

/// The first TCP port the servers listen on (one per twin pair of a round).
pub const FIRST_PORT: u16 = 18515;

/// One `ib_write_bw` pair: a server on `server`, a client on `client` connecting to it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct PlannedPerfRun {
    pub client: End,
    pub client_device: IbDevice,
    pub server: End,
    pub server_device: IbDevice,
    pub server_addr: Ipv4Addr,
    pub port: u16,
    /// What this twin pair may carry, Gb/s: the lower of the two ends' share of their port's
    /// rate (a Spark port's rate is split between its twins). `None` when a rate is unknown.
    pub allowed_gbps: Option<f64>,
}

/// The runs that go at once (both twins of one cable).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Round {
    pub cable: String,
    pub client_node: NodeName,
    pub server_node: NodeName,
    pub runs: Vec<PlannedPerfRun>,
}

/// Everything `fabric test` runs, in order.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct TestPlan {
    pub rounds: Vec<Round>,
    /// Seconds each run measures (`ib_write_bw -D`).
    pub duration_s: u32,
    /// Twin pairs that cannot be measured, and why.
    pub skipped: Vec<String>,
}

/// Why there is nothing to test.
#[derive(Debug, thiserror::Error)]
pub enum TestPlanError {
    #[error(transparent)]
    Link(#[from] LinkArgError),
    #[error(transparent)]
    Refused(#[from] FabricRefusal),
    #[error(
        "no twin pair has an address on both ends, so nothing can be measured: address the fabric first (`spark-launch fabric apply`){}",
        if .0.is_empty() { String::new() } else { format!("\n  {}", .0.join("\n  ")) }
    )]
    NothingAddressed(Vec<String>),
}

/// The test of the fabric `nodes` form (`given`: `--link`, as for the plan).
pub fn plan(
    nodes: &[NodeInput],
    given: &[LinkArg],
    duration_s: u32,
) -> Result<TestPlan, TestPlanError> {
    let map = cabling::link_map(nodes, given)?;
    let layout = cabling::layout(nodes, &map).map_err(|problems| FabricRefusal { problems })?;
    let facts = |n: &NodeName| nodes.iter().find(|x| &x.name == n).map(|x| &x.facts);
    // (label, client end, server end) per twin pair, grouped into rounds.
    let mut groups: Vec<(String, Vec<(End, End)>)> = Vec::new();
    match &layout {
        Layout::Direct(c) => groups.push((cable_label(&c.pairs), c.pairs.clone())),
        Layout::Ring(cs) => {
            for c in cs {
                groups.push((cable_label(&c.pairs), c.pairs.clone()));
            }
        }
        Layout::Switch(segs) => {
            // The head against every other node, both twins at once.
            let head = &nodes[0].name;
            let nets = cabling::switch_nets(segs);
            for other in nodes.iter().skip(1) {
                let mut pairs = Vec::new();
                for net in &nets {
                    let a = net.iter().find(|e| &e.node == head);
                    let b = net.iter().find(|e| e.node == other.name);
                    if let (Some(a), Some(b)) = (a, b) {
                        pairs.push((a.clone(), b.clone()));
                    }
                }
                if !pairs.is_empty() {
                    groups.push((cable_label(&pairs), pairs));
                }
            }
        }
    }
    let mut rounds = Vec::new();
    let mut skipped = Vec::new();
    // A twin that is down is no link at all: say it is not measured, and why.
    for (_, pairs) in &groups {
        for e in pairs.iter().flat_map(|(a, b)| [a, b]) {
            let Some(f) = facts(&e.node) else { continue };
            let Some(t) = twin_netdev(f, &e.iface) else {
                continue;
            };
            let down = f.rdma_device_of(&t).is_some_and(|d| !d.is_active());
            let paired = groups
                .iter()
                .flat_map(|(_, p)| p.iter())
                .any(|(a, b)| [a, b].iter().any(|x| x.node == e.node && x.iface == t));
            let note = format!(
                "{}:{t}, the twin of {e}, is down: not measured, and RDMA gets half of this port (see doctor's fabric.twins-active)",
                e.node
            );
            if down && !paired && !skipped.contains(&note) {
                skipped.push(note);
            }
        }
    }
    for (label, pairs) in groups {
        let mut runs = Vec::new();
        for (a, b) in pairs {
            let (Some(fa), Some(fb)) = (facts(&a.node), facts(&b.node)) else {
                continue;
            };
            let shared = fb.interface(&b.iface).and_then(|ib| {
                let ia = fa.interface(&a.iface)?;
                ib.ipv4
                    .iter()
                    .find(|x| ia.ipv4.iter().any(|y| y.subnet() == x.subnet()))
                    .copied()
            });
            let Some(server_addr) = shared else {
                skipped.push(format!(
                    "{a} ↔ {b}: no address on one subnet on both ends (the twin pair carries RDMA without one, but perftest's connection needs it)"
                ));
                continue;
            };
            let (Some(da), Some(db)) = (fa.rdma_device_of(&a.iface), fb.rdma_device_of(&b.iface))
            else {
                continue;
            };
            let port = FIRST_PORT + runs.len() as u16;
            runs.push(PlannedPerfRun {
                client: a.clone(),
                client_device: da.name.clone(),
                server: b.clone(),
                server_device: db.name.clone(),
                server_addr: server_addr.addr,
                port,
                allowed_gbps: match (share(fa, &a), share(fb, &b)) {
                    (Some(x), Some(y)) => Some(x.min(y)),
                    _ => None,
                },
            });
        }
        if let Some(first) = runs.first() {
            rounds.push(Round {
                cable: label,
                client_node: first.client.node.clone(),
                server_node: first.server.node.clone(),
                runs,
            });
        }
    }
    if rounds.is_empty() {
        return Err(TestPlanError::NothingAddressed(skipped));
    }
    Ok(TestPlan {
        rounds,
        duration_s,
        skipped,
    })
}

fn cable_label(pairs: &[(End, End)]) -> String {
    match pairs.first() {
        Some((a, b)) => format!("{a} ↔ {b}"),
        None => String::new(),
    }
}

/// An end's share of its port's rate: the device's rate divided among the twins of its port
/// that are up (a Spark's 200 Gb/s port is two ~100 Gb/s PCIe x4 twins).
fn share(facts: &NodeFacts, end: &End) -> Option<f64> {
    let dev = facts.rdma_device_of(&end.iface)?;
    let rate = dev.active_port()?.rate.as_ref()?.gbps?;
    let twins = match twin_netdev(facts, &end.iface) {
        Some(t) if facts.interface(&t).is_some_and(|i| i.is_up()) => 2.0,
        _ => 1.0,
    };
    Some(rate / twins)
}

fn argv(dev: &IbDevice, port: u16, duration: u32) -> String {
    format!(
        "ib_write_bw -d {} -p {port} -q 4 -F -R --report_gbits -D {duration}",
        sq(dev.as_str())
    )
}

/// The marker line before each run's output in the scripts' output.
pub const MARK: &str = "==== spark-launch perftest port ";

fn script(lines: &[String], wait_first: bool) -> String {
    let mut out = String::from(
        "PATH=$PATH:/usr/local/sbin:/usr/sbin:/sbin\nt=$(mktemp -d) || exit 1\ncommand -v ib_write_bw >/dev/null 2>&1 || { echo 'missing ib_write_bw: install perftest (apt-get install perftest)'; exit 3; }\n",
    );
    if wait_first {
        out.push_str("sleep 2\n");
    }
    for l in lines {
        out.push_str(l);
    }
    out.push_str("wait\n");
    out.push_str(&format!(
        "for f in \"$t\"/*; do [ -e \"$f\" ] || continue; echo \"{MARK}${{f##*/}}\"; cat \"$f\"; done\nrm -rf \"$t\"\n"
    ));
    out
}

/// The server side of a round (its `server_node`): one `ib_write_bw` per twin pair.
pub fn server_script(round: &Round, duration: u32) -> String {
    let lines: Vec<String> = round
        .runs
        .iter()
        .map(|r| {
            format!(
                "timeout {} {} > \"$t/{}\" 2>&1 &\n",
                duration + 60,
                argv(&r.server_device, r.port, duration),
                r.port
            )
        })
        .collect();
    script(&lines, false)
}

/// The client side of a round (its `client_node`), started two seconds after the servers.
pub fn client_script(round: &Round, duration: u32) -> String {
    let lines: Vec<String> = round
        .runs
        .iter()
        .map(|r| {
            format!(
                "timeout {} {} {} > \"$t/{}\" 2>&1 &\n",
                duration + 60,
                argv(&r.client_device, r.port, duration),
                r.server_addr,
                r.port
            )
        })
        .collect();
    script(&lines, true)
}

/// Splits a script's output into (port, that run's output).
pub fn split_outputs(out: &str) -> Vec<(u16, String)> {
    let mut res: Vec<(u16, String)> = Vec::new();
    for line in out.lines() {
        if let Some(p) = line.strip_prefix(MARK) {
            if let Ok(port) = p.trim().parse() {
                res.push((port, String::new()));
            }
            continue;
        }
        if let Some((_, text)) = res.last_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outputs_split_at_the_markers() {
        let s = format!("{MARK}18515\nline a\n{MARK}18516\nline b\nline c\n");
        let parts = split_outputs(&s);
        assert_eq!(parts.len(), 2);
        assert_eq!(parts[0], (18515, "line a\n".to_string()));
        assert_eq!(parts[1].1, "line b\nline c\n");
    }
}
