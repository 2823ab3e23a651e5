//! Run one piece of work on every node at once and collect every node's result.
//!
//! This is the only place that fans out over nodes: it waits for all nodes,
//! never stops at the first error, and returns results in the order the nodes were given, so a
//! caller can report every failed node, not only the first.

use std::fmt;
use std::future::Future;

use futures::stream::{self, StreamExt};

use crate::node::NodeName;

/// Runs `f` for every node with at most `limit` running at once (0 means no limit) and returns
/// `(node, result)` in the input order once every node has finished.
pub async fn for_each_node<I, T, E, F, Fut>(
    nodes: I,
    limit: usize,
    f: F,
) -> Vec<(NodeName, Result<T, E>)>
where
    I: IntoIterator<Item = NodeName>,
    F: Fn(NodeName) -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let nodes: Vec<NodeName> = nodes.into_iter().collect();
    let limit = if limit == 0 {
        nodes.len().max(1)
    } else {
        limit
    };
    let mut results: Vec<(usize, NodeName, Result<T, E>)> =
        stream::iter(nodes.into_iter().enumerate())
            .map(|(i, node)| {
                let fut = f(node.clone());
                async move { (i, node, fut.await) }
            })
            .buffer_unordered(limit)
            .collect()
            .await;
    results.sort_by_key(|(i, _, _)| *i);
    results.into_iter().map(|(_, n, r)| (n, r)).collect()
}

/// The nodes on which a step failed, each with its own error. Displays as
/// `failed on 2 of 3 nodes:` followed by one `  node: cause` line per node.
#[derive(Debug)]
pub struct NodeFailures<E> {
    pub total: usize,
    pub failed: Vec<(NodeName, E)>,
}

impl<E: fmt::Display> fmt::Display for NodeFailures<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "failed on {} of {} node{}:",
            self.failed.len(),
            self.total,
            if self.total == 1 { "" } else { "s" }
        )?;
        for (node, err) in &self.failed {
            write!(f, "\n  {node}: {err}")?;
        }
        Ok(())
    }
}

impl<E: fmt::Debug + fmt::Display> std::error::Error for NodeFailures<E> {}

/// Splits fan-out results into the successes, or every failure when at least one node failed.
pub fn all_ok<T, E>(
    results: Vec<(NodeName, Result<T, E>)>,
) -> Result<Vec<(NodeName, T)>, NodeFailures<E>> {
    let total = results.len();
    let mut ok = Vec::with_capacity(total);
    let mut failed = Vec::new();
    for (node, r) in results {
        match r {
            Ok(v) => ok.push((node, v)),
            Err(e) => failed.push((node, e)),
        }
    }
    if failed.is_empty() {
        Ok(ok)
    } else {
        Err(NodeFailures { total, failed })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    fn names(n: usize) -> Vec<NodeName> {
        (0..n)
            .map(|i| NodeName::new(format!("n{i}")).unwrap())
            .collect()
    }

    #[tokio::test]
    async fn every_node_runs_even_when_the_first_one_fails() {
        let ran = Arc::new(AtomicUsize::new(0));
        let results = for_each_node(names(4), 0, |n| {
            let ran = ran.clone();
            async move {
                ran.fetch_add(1, Ordering::SeqCst);
                if n.as_str() == "n0" || n.as_str() == "n2" {
                    Err(format!("{n} broke"))
                } else {
                    Ok(())
                }
            }
        })
        .await;
        assert_eq!(ran.load(Ordering::SeqCst), 4);
        let err = all_ok(results).unwrap_err();
        assert_eq!(
            err.to_string(),
            "failed on 2 of 4 nodes:\n  n0: n0 broke\n  n2: n2 broke"
        );
    }

    #[tokio::test]
    async fn results_come_back_in_node_order_whatever_order_they_finish_in() {
        let results = for_each_node(names(3), 0, |n| async move {
            let delay = match n.as_str() {
                "n0" => 30,
                "n1" => 10,
                _ => 0,
            };
            tokio::time::sleep(Duration::from_millis(delay)).await;
            Ok::<_, String>(n.to_string())
        })
        .await;
        let order: Vec<String> = results.into_iter().map(|(_, r)| r.unwrap()).collect();
        assert_eq!(order, vec!["n0", "n1", "n2"]);
    }

    #[tokio::test]
    async fn the_limit_bounds_how_many_nodes_run_at_once() {
        let running = Arc::new(AtomicUsize::new(0));
        let peak = Arc::new(AtomicUsize::new(0));
        let _ = for_each_node(names(6), 2, |_| {
            let running = running.clone();
            let peak = peak.clone();
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                peak.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, String>(())
            }
        })
        .await;
        assert_eq!(peak.load(Ordering::SeqCst), 2);
    }
}
