//! The launch check of `nccl-test --launch-check`: what `mpirun hostname` printed through the
//! job's exact launch path (containers, sshd on 2233, keys, hostfile), against the nodes that
//! must answer, one line per rank. Pure.

use serde::Serialize;

use super::parse::{FailureKind, parse_log};
use super::verdict::{Cause, fix_for};
use crate::problem::Problem;

/// One node and how many of its ranks answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct NodeAnswer {
    pub node: String,
    pub hostname: String,
    pub expected: u32,
    pub answered: u32,
}

/// The outcome of the launch check.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct LaunchCheck {
    /// Every node answered with all its ranks and mpirun exited 0.
    pub ok: bool,
    pub nodes: Vec<NodeAnswer>,
    /// Lines that look like a hostname of no node of the test.
    pub unexpected: Vec<String>,
    pub exit_status: Option<i32>,
    /// Why it failed (the first launch error in the output, or the nodes that stayed silent).
    pub cause: Option<Cause>,
}

/// Checks `log` against `expected`: (node name, hostname, ranks) per node.
pub fn launch_check(log: &str, expected: &[(String, String, u32)]) -> LaunchCheck {
    let runs = parse_log(log);
    let exit_status = runs.iter().rev().find_map(|r| r.exit_status);
    let mut nodes: Vec<NodeAnswer> = expected
        .iter()
        .map(|(node, hostname, ranks)| NodeAnswer {
            node: node.clone(),
            hostname: hostname.clone(),
            expected: *ranks,
            answered: 0,
        })
        .collect();
    let mut unexpected = Vec::new();
    for raw in log.lines() {
        let (_, line) = super::line::strip_tag(raw);
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') || t.contains(char::is_whitespace) {
            continue;
        }
        match nodes.iter_mut().find(|n| n.hostname == t) {
            Some(n) => n.answered += 1,
            None if t.len() <= 64
                && t.chars()
                    .all(|c| c.is_ascii_alphanumeric() || "-._".contains(c))
                && !t.chars().all(|c| c == '-') =>
            {
                unexpected.push(t.to_string())
            }
            None => {}
        }
    }
    let silent: Vec<&NodeAnswer> = nodes.iter().filter(|n| n.answered < n.expected).collect();
    let ok = silent.is_empty() && exit_status.is_none_or(|c| c == 0);
    let cause = if ok {
        None
    } else {
        let first = runs
            .iter()
            .flat_map(|r| r.failures.iter())
            .filter(|f| !f.kind.is_generic() || f.kind == FailureKind::MpiAbort)
            .min_by_key(|f| (f.kind.is_generic(), f.line));
        Some(match first {
            Some(f) => Cause { problem: Problem::with_fix(f.text.clone(), fix_for(&f.text).map(str::to_string)), host: f.host.clone(), line: Some(f.line) },
            None => Cause { problem: Problem::with_fix(if silent.is_empty() {
                    format!(
                        "mpirun exited with status {}",
                        exit_status.unwrap_or_default()
                    )
                } else {
                    format!(
                        "no answer from {}",
                        silent
                            .iter()
                            .map(|n| format!(
                                "{} ({} of {} ranks)",
                                n.node, n.answered, n.expected
                            ))
                            .collect::<Vec<_>>()
                            .join(", ")
                    )
                }, Some(
                    "check that the job's containers run on every node (`spark-launch status`) and that `spark-launch trust` was run".into(),
                )), host: None, line: None },
        })
    };
    LaunchCheck {
        ok,
        nodes,
        unexpected,
        exit_status,
        cause,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn want() -> Vec<(String, String, u32)> {
        vec![
            ("spark".into(), "spark".into(), 1),
            ("spark2".into(), "spark2".into(), 1),
        ]
    }

    #[test]
    fn every_node_answering_with_every_rank_is_ok() {
        let log = "# spark-launch: running hostname\nspark2\nspark\n# spark-launch: mpirun exit status 0\n";
        let c = launch_check(log, &want());
        assert!(c.ok, "{c:?}");
        assert_eq!(c.nodes[1].answered, 1);
        assert!(c.unexpected.is_empty());
    }

    #[test]
    fn a_silent_node_fails_with_mpiruns_reason_and_the_fix() {
        let log = "# spark-launch: running hostname\nspark\nHost key verification failed.\n--------------------------------------------------------------------------\nORTE was unable to reliably start one or more daemons.\n# spark-launch: mpirun exit status 1\n";
        let c = launch_check(log, &want());
        assert!(!c.ok);
        let cause = c.cause.unwrap();
        assert!(cause.problem.what.contains("Host key verification failed"));
        assert!(cause.problem.fix.unwrap().contains("spark-launch trust"));
    }

    #[test]
    fn a_container_hostname_instead_of_the_nodes_is_reported_as_unexpected() {
        let log = "spark\n3f2a9c1d7e6b\n# spark-launch: mpirun exit status 0\n";
        let c = launch_check(log, &want());
        assert!(!c.ok);
        assert_eq!(c.unexpected, vec!["3f2a9c1d7e6b"]);
        assert!(
            c.cause
                .unwrap()
                .problem
                .what
                .contains("no answer from spark2")
        );
    }
}
