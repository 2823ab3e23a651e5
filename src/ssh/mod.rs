//! The system OpenSSH client: one multiplexed connection per node, safely quoted commands,
//! copies, unix-socket forwarding, the remote probe and key trust. Talks to sshd; decides
//! nothing (which nodes, which keys go where, is decided by the caller or by `trust::plan`).
//!
//! # Using it from a command
//!
//! ```no_run
//! # async fn demo(targets: Vec<spark_launch::ssh::SshTarget>) -> Result<(), Box<dyn std::error::Error>> {
//! use spark_launch::ssh::{Pool, SshOptions, RunOptions};
//! let pool = Pool::connect(&targets, SshOptions::default()).await?; // every node, or every failure
//! let head = &pool.handles()[0];
//! let out = head.run(&["docker", "version", "--format", "{{.Server.Version}}"]).await?;
//! println!("{}", out.stdout_text());
//! // Raw status instead of an error on non-zero exit, with stdin and a deadline:
//! let out = pool
//!     .output(head.name(), &["sh", "-c", "cat > /tmp/x"], &RunOptions::stdin("data"))
//!     .await?;
//! // The node's Docker socket as a local socket, until `fwd` is dropped:
//! let fwd = head.forward_unix_socket("/var/run/docker.sock").await?;
//! let _socket_path = fwd.local_path();
//! // Facts, read exactly like `probe --root`:
//! let _facts = spark_launch::ssh::probe::probe_all(&pool).await;
//! pool.close().await;
//! # Ok(()) }
//! ```
//!
//! Commands get their nodes from the shared resolver in `cli::args`: `resolve` (facts of every
//! node, head first, plus the connected `Pool`), or `configured_nodes` + `ssh_targets` +
//! `connect` for commands that need no facts. It marks the machine spark-launch runs on as
//! `local`: its commands run here, without SSH. Close a pool with `close().await` when done
//! (dropping it also closes every master, blocking briefly).
//!
//! sshd's limits are kept by the session (`session`): a connection dropped before the
//! handshake (`MaxStartups`) is tried again with backoff, and at most `SESSIONS_PER_MASTER`
//! sessions run through one master (`MaxSessions`), more masters opening when needed.
//!
//! Every connection pins the host key by node name (`HostKeyAlias`), so changing link-local
//! addresses never break `known_hosts`; prefers AES-GCM; runs in `BatchMode` (no prompt can
//! hang a command) except the first contact of `trust`, which may hand a password to ssh
//! through `askpass`.

pub mod askpass;
mod error;
mod exec;
mod handle;
mod options;
mod pool;
pub mod probe;
pub mod prompt;
mod runtime_dir;
mod session;
pub mod trust;

pub use askpass::Password;
pub use error::{ConnectFailure, Dest, SshError, stderr_tail};
pub use exec::{Output, RunOptions};
pub use handle::{Forward, NodeHandle};
pub use options::{CIPHERS, SshOptions, bulk_ciphers};
pub use pool::{Pool, PoolError, SshTarget};
pub use runtime_dir::RuntimeDir;
pub use session::{CONNECT_ATTEMPTS, MAX_MASTERS, SESSIONS_PER_MASTER, Session, Slot};
