//! `Pool`: the live links to every node of a command's cluster, one multiplexed SSH connection
//! per remote node (the local node runs commands directly). Connecting fans out through
//! `node::for_each_node`, so every node's failure is reported, not only the first.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::node::NodeName;
use crate::node::{NodeFailures, for_each_node};

use super::askpass::{Askpass, Password};
use super::error::SshError;
use super::exec::{Output, RunOptions};
use super::handle::NodeHandle;
use super::options::SshOptions;
use super::runtime_dir::RuntimeDir;
use super::session::Session;

/// How to reach one node: what the cluster file (or `--hosts`) says about it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SshTarget {
    pub name: NodeName,
    /// Addresses or host names, tried in order until one answers.
    pub addresses: Vec<String>,
    /// The login user; `None`: ssh's default (the local user, or `~/.ssh/config`).
    pub user: Option<String>,
    pub port: u16,
    /// This machine: commands run here, no SSH.
    pub local: bool,
}

/// Live links to the nodes of a cluster, in the order they were added (head first).
#[derive(Debug)]
pub struct Pool {
    dir: RuntimeDir,
    opts: SshOptions,
    handles: Vec<Arc<NodeHandle>>,
    /// Every node ever given to `connect_all`, in the order first given (head first).
    order: Vec<NodeName>,
    next: AtomicUsize,
    /// At most this many connections are opened at once (0: all).
    pub limit: usize,
}

impl Pool {
    /// An empty pool with its private runtime folder.
    pub fn new(mut opts: SshOptions) -> Result<Pool, SshError> {
        let dir = RuntimeDir::create().map_err(SshError::RuntimeDir)?;
        if opts.learn_hosts_privately {
            opts.known_hosts.insert(0, dir.join("learned_hosts"));
        }
        Ok(Pool {
            dir,
            opts,
            handles: Vec::new(),
            order: Vec::new(),
            next: AtomicUsize::new(0),
            limit: 0,
        })
    }

    /// Connects to every target (in parallel); fails listing every node that failed.
    pub async fn connect(targets: &[SshTarget], opts: SshOptions) -> Result<Pool, PoolError> {
        let mut pool = Pool::new(opts).map_err(PoolError::Setup)?;
        let failed = pool.connect_all(targets, None).await;
        if failed.is_empty() {
            Ok(pool)
        } else {
            pool.close().await;
            Err(PoolError::Nodes(NodeFailures {
                total: targets.len(),
                failed,
            }))
        }
    }

    /// Connects the targets not yet in the pool, in parallel, with `password` for first contact
    /// (`None`: keys only, `BatchMode`). Adds those that connected and returns the failures,
    /// in target order. Local targets always succeed.
    pub async fn connect_all(
        &mut self,
        targets: &[SshTarget],
        password: Option<&Password>,
    ) -> Vec<(NodeName, SshError)> {
        for t in targets {
            if !self.order.contains(&t.name) {
                self.order.push(t.name.clone());
            }
        }
        let todo: Vec<&SshTarget> = targets
            .iter()
            .filter(|t| self.get(&t.name).is_err())
            .collect();
        let askpass = match password {
            Some(p) => match Askpass::create(&self.dir, p) {
                Ok(a) => Some(a),
                Err(e) => {
                    return todo
                        .iter()
                        .map(|t| {
                            (
                                t.name.clone(),
                                SshError::Io {
                                    node: t.name.clone(),
                                    what: "write the askpass file".into(),
                                    source: std::io::Error::new(e.kind(), e.to_string()),
                                },
                            )
                        })
                        .collect();
                }
            },
            None => None,
        };
        let this = &*self;
        let askpass = askpass.as_ref();
        let results = for_each_node(todo.iter().map(|t| t.name.clone()), self.limit, |name| {
            let target = todo.iter().find(|t| t.name == name).copied();
            async move {
                let Some(t) = target else {
                    return Err(SshError::UnknownNode(name));
                };
                this.open(t, askpass).await
            }
        })
        .await;
        let mut failed = Vec::new();
        for (name, r) in results {
            match r {
                Ok(h) => self.handles.push(Arc::new(h)),
                Err(e) => failed.push((name, e)),
            }
        }
        // Keep the order the nodes were first given in (head first), whatever order they
        // connected in.
        let order = &self.order;
        self.handles.sort_by_key(|h| {
            order
                .iter()
                .position(|n| n == h.name())
                .unwrap_or(usize::MAX)
        });
        failed
    }

    async fn open(&self, t: &SshTarget, askpass: Option<&Askpass>) -> Result<NodeHandle, SshError> {
        if t.local {
            return Ok(NodeHandle::local(t.name.clone(), self.dir.clone()));
        }
        let control = self
            .dir
            .join(&format!("c{}", self.next.fetch_add(1, Ordering::SeqCst)));
        let session = Session::open(
            &t.name,
            &t.addresses,
            t.user.as_deref(),
            t.port,
            &self.opts,
            control,
            askpass,
        )
        .await?;
        Ok(NodeHandle::remote(session, self.dir.clone()))
    }

    /// The link to `name`.
    pub fn get(&self, name: &NodeName) -> Result<&Arc<NodeHandle>, SshError> {
        self.handles
            .iter()
            .find(|h| h.name() == name)
            .ok_or_else(|| SshError::UnknownNode(name.clone()))
    }

    /// Every link, head first.
    pub fn handles(&self) -> &[Arc<NodeHandle>] {
        &self.handles
    }

    /// Every node name, head first.
    pub fn names(&self) -> Vec<NodeName> {
        self.handles.iter().map(|h| h.name().clone()).collect()
    }

    /// The private file where host keys first seen by this pool were recorded (only with
    /// `SshOptions::learn_hosts_privately`).
    pub fn learned_hosts(&self) -> Option<std::path::PathBuf> {
        self.opts
            .learn_hosts_privately
            .then(|| self.dir.join("learned_hosts"))
    }

    /// The private folder of this pool's sockets.
    pub fn runtime_dir(&self) -> &RuntimeDir {
        &self.dir
    }

    /// Runs `argv` on `name`, checked (non-zero exit is an error).
    pub async fn run(&self, name: &NodeName, argv: &[&str]) -> Result<Output, SshError> {
        self.get(name)?.run(argv).await
    }

    /// Runs `argv` on `name` and returns its output whatever its exit status.
    pub async fn output(
        &self,
        name: &NodeName,
        argv: &[&str],
        opts: &RunOptions,
    ) -> Result<Output, SshError> {
        self.get(name)?.output(argv, opts).await
    }

    /// Closes every SSH master.
    pub async fn close(&self) {
        let _ = for_each_node(self.names(), 0, |name| async move {
            if let Ok(h) = self.get(&name) {
                h.close().await;
            }
            Ok::<(), SshError>(())
        })
        .await;
    }

    /// Runs `work` on the pool, then closes every master whatever `work` returned: the pool
    /// is owned here, so nothing uses it after the close.
    pub async fn scope<T>(mut self, work: impl AsyncFnOnce(&mut Pool) -> T) -> T {
        let out = work(&mut self).await;
        self.close().await;
        out
    }
}

/// Connecting a pool failed.
#[derive(Debug, thiserror::Error)]
pub enum PoolError {
    #[error(transparent)]
    Setup(SshError),
    #[error("cannot connect: {0}")]
    Nodes(NodeFailures<SshError>),
}
