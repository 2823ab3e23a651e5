//! Runs containers (Docker Engine through bollard, local or over an SSH-forwarded socket) or
//! plain host processes. It only talks to engines and processes; it decides nothing.
//!
//! - `features`, `request`: pure: what an engine can do, and `ContainerSpec` → create request.
//! - `remote`: the SSH layer as a `RemoteNode` (forwarded Docker socket, remote scripts).
//! - `target`: where a node is and how it is reached (local, SSH, a given socket).
//! - `engine`: one node's Docker Engine (connect, create/start/stop, exec, logs).
//! - `image`: an image's identity by content, and streaming it out of or into one engine.
//! - `host`, `shell`: the host-process runtime, as short `sh` scripts run locally or over SSH.
//! - `cluster`: node handles and the job operations common to both runtimes.
//! - `wait`: every wait with a deadline, an interval and a way to abort.

pub mod cluster;
pub mod engine;
pub mod error;
pub mod features;
pub mod host;
pub mod http;
pub mod image;
pub mod remote;
pub mod request;
pub mod shell;
pub mod target;
pub mod wait;

pub use cluster::{Cluster, JobEntry, NodeRuntime, STOP_GRACE};
pub use engine::{Engine, ExecOutput, LogChunk, LogStream};
pub use error::RuntimeError;
pub use features::{Arch, EngineFeatures, GpuAccess, gpu_access};
pub use request::{CreateRequest, create_request};
pub use target::{EngineEndpoint, NodeTarget, Reach, RemoteNode, ShellOutput};
pub mod build;
