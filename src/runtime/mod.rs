//! Runs containers (Docker Engine through bollard, local or over an SSH-forwarded socket) or
//! plain host processes. It only talks to engines and processes; it decides nothing.
//!
//! - `features`, `request`: pure: what an engine can do, and `ContainerSpec` → create request.
//! - `remote`: the SSH layer as a `RemoteNode` (forwarded Docker socket, remote scripts).
//! - `target`: where a node is and how it is reached (local, SSH, a given socket).
//! - `engine`: one node's Docker Engine (connect, create/start/stop, exec, logs).
//! - `image`: an image's identity by content, and streaming it out of or into one engine.
//! - `layer_store`: an image's layers read from the engine's classic store on this machine,
//!   without the engine's whole-image export.
//! - `libnccl`: which NCCL a container of an image would load, read without starting it.
//! - `host_nccl`: the same read over a node's own files (`--runtime host`), for the probe.
//! - `shell`: the one way to run a script on a node (`NodeShell`: this machine, or over SSH).
//! - `host`: the host-process runtime, as short scripts run through the node's shell.
//! - `cluster`: node handles and the job operations common to both runtimes.
//! - `wait`: every wait with a deadline, an interval and a way to abort.

pub mod cluster;
pub mod engine;
pub mod error;
pub mod features;
pub mod host;
pub mod host_nccl;
pub mod http;
pub mod image;
pub mod layer_store;
pub mod libnccl;
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
pub use shell::{LocalShell, NodeShell, ShellError, ShellOutput};
pub use target::{EngineEndpoint, NodeTarget, Reach, RemoteNode};
pub mod build;
