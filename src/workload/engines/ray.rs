//! Ray as a way for an engine's ranks to form one group across nodes: its ports, the query
//! that lists Ray's members as JSON (run inside the head's container, by the head's own wait
//! and by `WaitRay`), and the comparison of that list with the members a plan intends.
//!
//! Pure: Ray's answer in, a state out.

use serde::Deserialize;

use crate::plan::RayMember;

/// Ray's GCS port on the head unless told otherwise (`ray start --port`).
pub const DEFAULT_PORT: u16 = 6379;
/// The ports Ray's workers bind on every node unless told otherwise (`ray start
/// --min-worker-port/--max-worker-port`).
pub const WORKER_PORTS: (u16, u16) = (10002, 19999);
/// How long the head waits inside its container for Ray to list every node.
pub const JOIN_TIMEOUT_S: u64 = 600;

/// The Python the head runs (inside its container) to list Ray's nodes as JSON:
/// `[{"ip": ..., "alive": ..., "gpus": ...}]`. `WaitRay` runs it too.
pub const QUERY_PY: &str = r#"import json, ray
ray.init(address="auto", logging_level="ERROR")
print(json.dumps([{"ip": n.get("NodeManagerAddress"), "alive": bool(n.get("Alive")), "gpus": float(n.get("Resources", {}).get("GPU", 0))} for n in ray.nodes()]))
"#;

/// What Ray reported about one node (from [`QUERY_PY`]'s JSON).
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct RaySeen {
    pub ip: Option<String>,
    pub alive: bool,
    pub gpus: f64,
}

/// Ray's membership against what was intended.
#[derive(Clone, Debug, PartialEq)]
pub enum RayState {
    Complete,
    /// Not yet (or never): what is missing, and nodes at addresses nobody intended.
    Incomplete {
        missing: Vec<String>,
        strangers: Vec<String>,
    },
}

impl RayState {
    /// One line for progress and timeouts.
    pub fn describe(&self) -> String {
        match self {
            RayState::Complete => "every node joined with its GPUs".to_string(),
            RayState::Incomplete { missing, strangers } => {
                let mut s = format!("waiting for {}", missing.join(", "));
                if !strangers.is_empty() {
                    s.push_str(&format!(
                        "; Ray also lists {} — a node that joined from another interface (check VLLM_HOST_IP / RAY_NODE_IP_ADDRESS on it)",
                        strangers.join(", ")
                    ));
                }
                s
            }
        }
    }
}

/// Compares Ray's node list (the query's JSON) with the intended members.
pub fn ray_state(expect: &[RayMember], query_output: &str) -> Result<RayState, String> {
    let json = query_output
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('['))
        .ok_or_else(|| format!("no node list in Ray's answer: {}", query_output.trim()))?;
    let seen: Vec<RaySeen> =
        serde_json::from_str(json).map_err(|e| format!("unreadable Ray node list: {e}"))?;
    let alive: Vec<&RaySeen> = seen.iter().filter(|s| s.alive).collect();
    let mut missing = Vec::new();
    for m in expect {
        let ip = m.ip.to_string();
        match alive.iter().find(|s| s.ip.as_deref() == Some(ip.as_str())) {
            None => missing.push(format!("{} at {ip}", m.node)),
            Some(s) if s.gpus < f64::from(m.gpus) => missing.push(format!(
                "{} at {ip} (Ray sees {} GPU, expected {})",
                m.node, s.gpus, m.gpus
            )),
            Some(_) => {}
        }
    }
    let strangers = alive
        .iter()
        .filter_map(|s| s.ip.clone())
        .filter(|ip| !expect.iter().any(|m| m.ip.to_string() == *ip))
        .collect();
    if missing.is_empty() {
        Ok(RayState::Complete)
    } else {
        Ok(RayState::Incomplete { missing, strangers })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::NodeName;

    fn member(node: &str, ip: &str) -> RayMember {
        RayMember {
            node: NodeName::new(node).unwrap(),
            ip: ip.parse().unwrap(),
            gpus: 1,
        }
    }

    #[test]
    fn ray_is_complete_when_every_intended_address_is_alive_with_its_gpus() {
        let expect = [member("a", "10.0.0.1"), member("b", "10.0.0.2")];
        let out = r#"[{"ip": "10.0.0.1", "alive": true, "gpus": 1.0}, {"ip": "10.0.0.2", "alive": true, "gpus": 1.0}]"#;
        assert_eq!(ray_state(&expect, out), Ok(RayState::Complete));
    }

    #[test]
    fn a_worker_that_joined_from_the_wrong_interface_is_named() {
        let expect = [member("a", "10.0.0.1"), member("b", "10.0.0.2")];
        let out = "some log line\n[{\"ip\": \"10.0.0.1\", \"alive\": true, \"gpus\": 1}, {\"ip\": \"192.168.1.7\", \"alive\": true, \"gpus\": 1}]";
        let state = ray_state(&expect, out).unwrap();
        let text = state.describe();
        assert!(text.contains("waiting for b at 10.0.0.2"), "{text}");
        assert!(text.contains("192.168.1.7"), "{text}");
    }

    #[test]
    fn a_node_without_its_gpu_is_not_yet_a_member() {
        let expect = [member("a", "10.0.0.1")];
        let out = r#"[{"ip": "10.0.0.1", "alive": true, "gpus": 0}]"#;
        let text = ray_state(&expect, out).unwrap().describe();
        assert!(text.contains("Ray sees 0 GPU"), "{text}");
        assert!(ray_state(&expect, "Traceback ...").is_err());
    }
}
