//! Where a running job's API answers, found the way `status` finds jobs: by spark-launch's
//! labels on the nodes. The job's head container (role `head`) carries the port it serves on
//! (`dev.spark-launch.ports`); the address is the one it is bound to (`--bind`, the
//! `dev.spark-launch.bind` label) when it has one, else this machine's loopback when the head is
//! this machine, else the address the cluster file (or `--hosts`) gives for the node.

use std::collections::BTreeMap;

use super::BenchError;
use super::request::BaseUrl;
use crate::node::for_each_node;
use crate::node::{NodeName, Role};
use crate::plan::JobName;
use crate::runtime::{Cluster, JobEntry, Reach};

/// The base URL of `job`'s API.
pub async fn job_url(
    cluster: &Cluster,
    job: &JobName,
    addresses: &BTreeMap<NodeName, String>,
) -> Result<BaseUrl, BenchError> {
    let results = for_each_node(cluster.names(), 0, |node| async move {
        cluster.node(&node)?.jobs(Some(job), None).await
    })
    .await;
    let mut entries = Vec::new();
    let mut unreachable = Vec::new();
    for (node, r) in results {
        match r {
            Ok(mut e) => entries.append(&mut e),
            Err(e) => unreachable.push(format!("{node}: {e}")),
        }
    }
    let head = serving_head(job, &entries, &unreachable).map_err(BenchError::Job)?;
    let (node, port) = (head.node.clone(), head.ports[0]);
    // Bound to one address (`--bind`): it answers there and nowhere else, loopback included.
    if let Some(a) = head.bind {
        return Ok(BaseUrl::of(a.to_string(), port));
    }
    let reach = cluster
        .node(&node)
        .map(|n| n.target.reach.clone())
        .map_err(|e| BenchError::Job(e.to_string()))?;
    let host = match reach {
        Reach::Local => "127.0.0.1".to_string(),
        Reach::Remote(_) => addresses.get(&node).cloned().ok_or_else(|| {
            BenchError::Job(format!(
                "job {job} serves on {node} port {port}, but no address of {node} is known here: give it with --url http://ADDRESS:{port}/v1"
            ))
        })?,
        Reach::EngineOnly(_) => {
            return Err(BenchError::Job(format!(
                "job {job} serves on {node} port {port}, a node reached only through its Docker socket: give its address with --url http://ADDRESS:{port}/v1"
            )));
        }
    };
    Ok(BaseUrl::of(host, port))
}

/// The job's running head that serves a port, or why there is none.
pub fn serving_head<'a>(
    job: &JobName,
    entries: &'a [JobEntry],
    unreachable: &[String],
) -> Result<&'a JobEntry, String> {
    let not_asked = if unreachable.is_empty() {
        String::new()
    } else {
        format!(
            " (not every node could be asked: {})",
            unreachable.join("; ")
        )
    };
    if entries.is_empty() {
        return Err(format!(
            "no job named {job} on these nodes{not_asked}: `spark-launch status` lists the jobs"
        ));
    }
    let heads: Vec<&JobEntry> = entries
        .iter()
        .filter(|e| e.role.as_deref() == Some(Role::Head.as_str()) && !e.ports.is_empty())
        .collect();
    let Some(head) = heads.first() else {
        return Err(format!(
            "job {job} has no head that serves a port (is it a serving job? `spark-launch status {job}` shows its parts){not_asked}"
        ));
    };
    if head.state != "running" {
        return Err(format!(
            "job {job}'s head on {} is {}{}: see `spark-launch logs {job}`",
            head.node,
            head.state,
            head.exit_code
                .map(|c| format!(" (exit code {c})"))
                .unwrap_or_default()
        ));
    }
    Ok(head)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::RuntimeKind;

    fn entry(node: &str, role: &str, state: &str, ports: Vec<u16>) -> JobEntry {
        JobEntry {
            job: "demo".into(),
            node: NodeName::new(node).unwrap(),
            role: Some(role.into()),
            name: format!("sl-demo-{node}"),
            runtime: RuntimeKind::Docker,
            state: state.into(),
            exit_code: (state != "running").then_some(1),
            image: "img".into(),
            started_at: None,
            ports,
            bind: None,
            memory_limit: None,
            oom_killed: false,
            workload: None,
            runtime_cache: None,
        }
    }

    #[test]
    fn the_endpoint_is_the_running_heads_labelled_port() {
        let job = JobName::new("demo").unwrap();
        let entries = [
            entry("b", "worker", "running", vec![]),
            entry("a", "head", "running", vec![8000]),
        ];
        let head = serving_head(&job, &entries, &[]).unwrap();
        assert_eq!((head.node.as_str(), head.ports[0]), ("a", 8000));
    }

    #[test]
    fn a_missing_job_or_a_stopped_head_is_named() {
        let job = JobName::new("demo").unwrap();
        let e = serving_head(&job, &[], &["c: ssh: timeout".into()]).unwrap_err();
        assert!(
            e.contains("no job named demo") && e.contains("c: ssh: timeout"),
            "{e}"
        );
        let e = serving_head(&job, &[entry("a", "head", "exited", vec![8000])], &[]).unwrap_err();
        assert!(e.contains("head on a is exited (exit code 1)"), "{e}");
        let e = serving_head(&job, &[entry("a", "head", "running", vec![])], &[]).unwrap_err();
        assert!(e.contains("no head that serves a port"), "{e}");
    }
}
