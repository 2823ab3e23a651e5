//! Asking a supervised node something through a connection that may have dropped: when a call
//! to the node fails, its SSH connection is opened again (a new master, the Docker socket
//! forwarded at the same local path, so the engine client goes on as it was) and the call is
//! made once more — as the attached launch's watcher does. A node whose connection cannot be
//! opened again is named by how it is reached (`ssh user@host`), never by the engine client's
//! own words (a `hyper` error), which go to the debug log.
//!
//! Effects only: whether to restart or wait is `supervise::machine`'s decision.

use std::future::Future;

use crate::runtime::RuntimeError;
use crate::runtime::cluster::NodeRuntime;
use crate::runtime::target::Reach;

/// Why a node could not be asked.
#[derive(Debug, thiserror::Error)]
pub enum Unanswered {
    /// The node answered, with an error (its engine's own words), or its connection stood.
    #[error(transparent)]
    Runtime(#[from] RuntimeError),
    /// No answer through the node's SSH connection, and opening it again failed.
    #[error("no answer through the SSH connection ({via}); connecting again: {cause}")]
    Lost { via: String, cause: String },
}

/// What to do after a call failed, given what connecting again said.
#[derive(Debug, PartialEq, Eq)]
pub enum Next {
    /// A new connection is open: make the call once more.
    Again,
    /// The connection stood (or the node is not reached over SSH): the failure is the node's
    /// own answer.
    Keep,
    /// The connection is gone and could not be opened again.
    Lost,
}

/// The decision after a failed call: `reconnected` is what `NodeRuntime::reconnect` said.
pub fn next(reconnected: &Result<bool, RuntimeError>) -> Next {
    match reconnected {
        Ok(true) => Next::Again,
        Ok(false) => Next::Keep,
        Err(_) => Next::Lost,
    }
}

/// How the node is reached, for messages (`ssh root@10.0.0.2`, `the local shell`).
pub fn via(runtime: &NodeRuntime) -> String {
    match &runtime.target.reach {
        Reach::Remote(r) => r.via(),
        Reach::Local => "this machine".into(),
        Reach::EngineOnly(ep) => ep.to_string(),
    }
}

/// Makes `call` on `runtime`; when it fails, connects to the node again and, when a new
/// connection opened, makes it once more (see the module docs).
pub async fn asked<T, F, Fut>(runtime: &NodeRuntime, call: F) -> Result<T, Unanswered>
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, RuntimeError>>,
{
    let first = match call().await {
        Ok(v) => return Ok(v),
        Err(e) => e,
    };
    let reconnected = match &runtime.target.reach {
        // The SSH layer's own words (`ssh 10.0.0.2: connection refused: ...`), without the
        // node's name it starts with: the event names the node already.
        Reach::Remote(remote) => remote.reconnect().await.map_err(|e| {
            let node = format!("{}: ", runtime.name());
            RuntimeError::Other(e.strip_prefix(&node).unwrap_or(&e).to_string())
        }),
        _ => Ok(false),
    };
    match next(&reconnected) {
        Next::Again => {
            tracing::debug!(
                "{}: the SSH connection was opened again after: {first}",
                runtime.name()
            );
            call().await.map_err(Unanswered::Runtime)
        }
        Next::Keep => Err(Unanswered::Runtime(first)),
        Next::Lost => {
            tracing::debug!("{}: no answer ({first})", runtime.name());
            let cause = match reconnected {
                Err(RuntimeError::Other(m)) => m,
                Err(e) => e.to_string(),
                Ok(_) => String::new(),
            };
            Err(Unanswered::Lost {
                via: via(runtime),
                cause,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::sync::Arc;
    use std::sync::Mutex;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use bytes::Bytes;
    use futures::future::BoxFuture;
    use futures::stream::BoxStream;
    use tokio::sync::mpsc::UnboundedSender;

    use super::*;
    use crate::node::{NodeName, Role};
    use crate::runtime::shell::{NodeShell, ShellError, ShellOutput};
    use crate::runtime::{NodeTarget, RemoteNode};

    /// A remote node whose `reconnect` answers what the test gives, in order.
    #[derive(Debug)]
    struct Flaky {
        node: NodeName,
        answers: Mutex<Vec<Result<bool, String>>>,
        reconnects: AtomicUsize,
    }

    impl NodeShell for Flaky {
        fn node(&self) -> &NodeName {
            &self.node
        }
        fn via(&self) -> String {
            "ssh root@10.0.0.2".into()
        }
        fn run<'a>(
            &'a self,
            _script: &'a str,
            _stdin: Vec<u8>,
            _lines: Option<UnboundedSender<String>>,
        ) -> BoxFuture<'a, Result<ShellOutput, ShellError>> {
            Box::pin(async move {
                Err(ShellError {
                    node: self.node.clone(),
                    via: self.via(),
                    cause: "not used".into(),
                })
            })
        }
        fn stream(&self, _script: &str) -> BoxStream<'static, Result<Bytes, ShellError>> {
            Box::pin(futures::stream::empty())
        }
    }

    impl RemoteNode for Flaky {
        fn forward_socket<'a>(
            &'a self,
            _remote: &'a str,
        ) -> BoxFuture<'a, Result<PathBuf, String>> {
            Box::pin(async { Err("no socket".to_string()) })
        }
        fn reconnect(&self) -> BoxFuture<'_, Result<bool, String>> {
            self.reconnects.fetch_add(1, Ordering::SeqCst);
            let a = self
                .answers
                .lock()
                .map(|mut a| a.remove(0))
                .unwrap_or(Ok(false));
            Box::pin(async move { a })
        }
    }

    fn runtime(answers: Vec<Result<bool, String>>) -> (NodeRuntime, Arc<Flaky>) {
        let flaky = Arc::new(Flaky {
            node: NodeName::new("spark-2").unwrap(),
            answers: Mutex::new(answers),
            reconnects: AtomicUsize::new(0),
        });
        let target = NodeTarget {
            name: NodeName::new("spark-2").unwrap(),
            role: Role::Worker,
            reach: Reach::Remote(flaky.clone()),
            docker_socket: None,
        };
        (NodeRuntime::new(target), flaky)
    }

    /// What the engine client says when the forwarded socket leads nowhere.
    fn dead_socket() -> RuntimeError {
        RuntimeError::Api {
            op: "inspect container sl-sup-spark-2".into(),
            cause: "error in the hyper legacy client: client error (Connect)".into(),
        }
    }

    #[tokio::test]
    async fn a_call_that_failed_on_a_dropped_connection_is_made_again_through_a_new_one() {
        let (rt, flaky) = runtime(vec![Ok(true)]);
        let calls = AtomicUsize::new(0);
        let got = asked(&rt, || async {
            match calls.fetch_add(1, Ordering::SeqCst) {
                0 => Err(dead_socket()),
                _ => Ok("running"),
            }
        })
        .await
        .unwrap();
        assert_eq!(got, "running");
        assert_eq!(calls.load(Ordering::SeqCst), 2);
        assert_eq!(flaky.reconnects.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_connection_that_cannot_be_opened_again_is_named_by_how_the_node_is_reached_not_by_the_engine_client()
     {
        let (rt, _) = runtime(vec![Err(
            "spark-2: ssh root@10.0.0.2: connection refused".into()
        )]);
        let e = asked(&rt, || async { Err::<(), _>(dead_socket()) })
            .await
            .unwrap_err();
        assert!(matches!(e, Unanswered::Lost { .. }));
        let text = e.to_string();
        assert!(
            text == "no answer through the SSH connection (ssh root@10.0.0.2); connecting again: ssh root@10.0.0.2: connection refused",
            "{text}"
        );
        assert!(!text.contains("hyper"), "{text}");
    }

    #[tokio::test]
    async fn an_error_through_a_connection_that_stood_is_the_nodes_own_answer() {
        let (rt, flaky) = runtime(vec![Ok(false)]);
        let calls = AtomicUsize::new(0);
        let e = asked(&rt, || async {
            calls.fetch_add(1, Ordering::SeqCst);
            Err::<(), _>(RuntimeError::Other("No such container (HTTP 404)".into()))
        })
        .await
        .unwrap_err();
        assert_eq!(e.to_string(), "No such container (HTTP 404)");
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert_eq!(flaky.reconnects.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn what_connecting_again_said_decides_the_next_step() {
        assert_eq!(next(&Ok(true)), Next::Again);
        assert_eq!(next(&Ok(false)), Next::Keep);
        assert_eq!(
            next(&Err(RuntimeError::Other("refused".into()))),
            Next::Lost
        );
    }
}
