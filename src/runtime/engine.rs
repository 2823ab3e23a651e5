//! One node's Docker Engine, through bollard's ordinary unix-socket client: connecting (with
//! the errors a user can act on: Docker missing, socket permission, dockerd down, API too old),
//! and the container operations jobs need. It decides nothing: the spec and the plan say what
//! to create; GPUs are requested as `features::gpu_access` decides from this engine's info.

use std::collections::HashMap;
use std::io::ErrorKind;
use std::time::Duration;

use bollard::Docker;
use bollard::models::{ContainerInspectResponse, ContainerSummary, ExecConfig};
use bollard::query_parameters::{
    CreateContainerOptionsBuilder, InspectContainerOptions, ListContainersOptionsBuilder,
    LogsOptionsBuilder, RemoveContainerOptionsBuilder, StopContainerOptionsBuilder,
    UploadToContainerOptionsBuilder,
};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio_util::sync::CancellationToken;

use super::error::{RuntimeError, describe_bollard, status_of};
use super::features::{ApiVersion, Arch, EngineFeatures, GpuAccess, MIN_API, gpu_access};
use super::request::create_request;
use super::target::EngineEndpoint;
use super::wait::{self, Probe};
use crate::node::NodeName;
use crate::plan::spec::{ContainerFile, ContainerSpec, LABEL_JOB};
use crate::problem::Problem;

/// Requests that should answer quickly (inspect, create, start).
const REQUEST_TIMEOUT: Duration = Duration::from_secs(120);
/// Streams (logs -f, image load) are bounded by their own deadlines or stall checks, not by
/// the client's request timeout.
const STREAM_TIMEOUT: Duration = Duration::from_secs(24 * 3600);
/// How long `connect` waits for the socket to accept.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Output of one exec kept in memory at most (nccl-tests logs are far smaller).
const EXEC_OUTPUT_LIMIT: usize = 16 << 20;

/// A connected engine.
#[derive(Clone, Debug)]
pub struct Engine {
    node: NodeName,
    endpoint: EngineEndpoint,
    docker: Docker,
    streaming: Docker,
    features: EngineFeatures,
}

/// The output of a command run in a container.
#[derive(Clone, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct ExecOutput {
    pub exit_code: i64,
    pub stdout: String,
    pub stderr: String,
}

/// Which stream a log line came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogStream {
    Stdout,
    Stderr,
}

/// One chunk of a container's log (usually one line, with its trailing newline).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogChunk {
    pub stream: LogStream,
    pub bytes: Bytes,
}

impl Engine {
    /// Connects to the engine at `endpoint` for `node`: checks the socket (missing /
    /// permission / refused), negotiates the API version (at least [`MIN_API`]) and reads the
    /// engine's features.
    pub async fn connect(
        node: &NodeName,
        endpoint: EngineEndpoint,
    ) -> Result<Engine, RuntimeError> {
        let socket = endpoint.socket.display().to_string();
        match tokio::time::timeout(
            CONNECT_TIMEOUT,
            tokio::net::UnixStream::connect(&endpoint.socket),
        )
        .await
        {
            Err(_) => {
                return Err(RuntimeError::Unreachable {
                    socket,
                    cause: format!("no connection within {}s", CONNECT_TIMEOUT.as_secs()),
                });
            }
            Ok(Err(e)) => {
                return Err(match e.kind() {
                    ErrorKind::NotFound => RuntimeError::DockerMissing { socket },
                    ErrorKind::PermissionDenied => RuntimeError::SocketPermission { socket },
                    ErrorKind::ConnectionRefused => RuntimeError::DockerNotRunning { socket },
                    _ => RuntimeError::Unreachable {
                        socket,
                        cause: e.to_string(),
                    },
                });
            }
            Ok(Ok(_probe)) => {}
        }
        let docker = Docker::connect_with_unix(
            &socket,
            REQUEST_TIMEOUT.as_secs(),
            bollard::API_DEFAULT_VERSION,
        )
        .map_err(|e| RuntimeError::Unreachable {
            socket: socket.clone(),
            cause: describe_bollard(&e),
        })?;
        let version = docker
            .version()
            .await
            .map_err(|e| RuntimeError::api(format!("ask the engine at {socket} its version"), e))?;
        let server = version.version.clone().unwrap_or_else(|| "?".to_string());
        let api = version
            .api_version
            .as_deref()
            .and_then(ApiVersion::parse)
            .ok_or_else(|| RuntimeError::Unreachable {
                socket: socket.clone(),
                cause: format!(
                    "the engine reported no usable API version ({:?})",
                    version.api_version
                ),
            })?;
        if api < MIN_API {
            return Err(RuntimeError::ApiTooOld { found: api, server });
        }
        // Speak the server's version when it is older than ours (what bollard's negotiation
        // does, without asking for the version a second time).
        let ours = bollard::API_DEFAULT_VERSION;
        let speak = if (api.major as usize, api.minor as usize)
            < (ours.major_version, ours.minor_version)
        {
            bollard::ClientVersion {
                major_version: api.major as usize,
                minor_version: api.minor as usize,
            }
        } else {
            *ours
        };
        let docker = Docker::connect_with_unix(&socket, REQUEST_TIMEOUT.as_secs(), &speak)
            .map_err(|e| RuntimeError::Unreachable {
                socket: socket.clone(),
                cause: describe_bollard(&e),
            })?;
        let info = docker
            .info()
            .await
            .map_err(|e| RuntimeError::api("read the engine's info", e))?;
        let mut runtimes: Vec<String> = info
            .runtimes
            .as_ref()
            .map(|r| r.keys().cloned().collect())
            .unwrap_or_default();
        runtimes.sort();
        let features = EngineFeatures {
            server_version: server,
            api,
            os: info.os_type.clone().unwrap_or_else(|| "linux".to_string()),
            arch: Arch::normalize(info.architecture.as_deref().unwrap_or("")),
            runtimes,
            default_runtime: info.default_runtime.clone(),
            cdi_spec_dirs: info.cdi_spec_dirs.clone().unwrap_or_default(),
            storage_driver: info.driver.clone().unwrap_or_default(),
            root_dir: info.docker_root_dir.clone().unwrap_or_default(),
        };
        let streaming = docker.clone().with_timeout(STREAM_TIMEOUT);
        Ok(Engine {
            node: node.clone(),
            endpoint,
            docker,
            streaming,
            features,
        })
    }

    pub fn node(&self) -> &NodeName {
        &self.node
    }

    pub fn endpoint(&self) -> &EngineEndpoint {
        &self.endpoint
    }

    pub fn features(&self) -> &EngineFeatures {
        &self.features
    }

    /// The bollard client, for operations this module does not wrap.
    pub fn docker(&self) -> &Docker {
        &self.docker
    }

    /// The same client without the request timeout, for long streams.
    pub(crate) fn streaming(&self) -> &Docker {
        &self.streaming
    }

    /// How GPUs would be requested for `spec` on this engine, or why they cannot be.
    pub fn gpu_access(&self, spec: &ContainerSpec) -> Result<GpuAccess, RuntimeError> {
        Ok(gpu_access(spec.gpus, &self.features)?)
    }

    /// Creates (does not start) the container of `spec` and puts its secret files in. GPUs are
    /// checked first, so a GPU request on an engine without GPU support creates nothing; a
    /// failed upload removes the container again.
    pub async fn create(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        let gpu = self.gpu_access(spec)?;
        let req = create_request(spec, &gpu);
        let options = CreateContainerOptionsBuilder::new().name(&req.name).build();
        let id = match self.docker.create_container(Some(options), req.body).await {
            Ok(r) => r.id,
            Err(e) if status_of(&e) == Some(404) && describe_bollard(&e).contains("image") => {
                return Err(RuntimeError::ImageMissing {
                    image: spec.image.clone(),
                    node: self.node.to_string(),
                });
            }
            Err(e) => {
                return Err(RuntimeError::api(
                    format!("create container {}", spec.name),
                    e,
                ));
            }
        };
        // Secrets go in through the archive upload, before the container starts: never in
        // the create body (which `docker inspect` shows), argv or the environment.
        for f in &spec.secret_files {
            let mut content = f.content.expose().as_bytes().to_vec();
            if !content.ends_with(b"\n") {
                content.push(b'\n');
            }
            if let Err(e) = self.write_file(&spec.name, &f.path, &content, f.mode).await {
                if let Err(rm) = self.remove(&spec.name, Duration::ZERO).await {
                    tracing::warn!(
                        "{}: could not remove {} after a failed upload: {rm}",
                        self.node,
                        spec.name
                    );
                }
                return Err(e);
            }
        }
        if let Err(e) = self.put_files(&spec.name, &spec.files).await {
            if let Err(rm) = self.remove(&spec.name, Duration::ZERO).await {
                tracing::warn!(
                    "{}: could not remove {} after a failed upload: {rm}",
                    self.node,
                    spec.name
                );
            }
            return Err(e);
        }
        Ok(id)
    }

    /// Puts the plan's plain files into the created container `name`, all in one archive
    /// upload (parent folders created); nothing to do without files.
    async fn put_files(&self, name: &str, files: &[ContainerFile]) -> Result<(), RuntimeError> {
        if files.is_empty() {
            return Ok(());
        }
        let what = format!("put {} file(s) in {name}", files.len());
        let mut contents = Vec::with_capacity(files.len());
        for f in files {
            let content = f
                .content
                .bytes()
                .map_err(|e| RuntimeError::Other(format!("{what}: {}: {e}", f.path)))?;
            contents.push((f.path.as_str(), content, f.mode));
        }
        let entries = contents.iter().map(|(p, c, m)| (*p, c.as_slice(), *m));
        self.upload(name, what, entries).await
    }

    /// Uploads regular files (absolute path, content, mode) into the container `name` as one
    /// tar archive unpacked at `/`: parent folders are created, no shell is needed in the
    /// image. A path that is empty or climbs with `..` is refused before anything is sent.
    async fn upload<'a>(
        &self,
        name: &str,
        what: String,
        files: impl IntoIterator<Item = (&'a str, &'a [u8], u32)>,
    ) -> Result<(), RuntimeError> {
        let mut builder = tar::Builder::new(Vec::new());
        for (path, content, mode) in files {
            let rel = path.trim_start_matches('/');
            if rel.is_empty() || rel.split('/').any(|p| p == "..") {
                return Err(RuntimeError::Other(format!(
                    "{what}: {path:?} is not a usable file path"
                )));
            }
            let mut header = tar::Header::new_gnu();
            header.set_size(content.len() as u64);
            header.set_mode(mode);
            header.set_mtime(0);
            header.set_entry_type(tar::EntryType::Regular);
            builder
                .append_data(&mut header, rel, content)
                .map_err(|e| RuntimeError::Other(format!("{what}: {e}")))?;
        }
        let archive = builder
            .into_inner()
            .map_err(|e| RuntimeError::Other(format!("{what}: {e}")))?;
        let options = UploadToContainerOptionsBuilder::new().path("/").build();
        self.docker
            .upload_to_container(name, Some(options), bollard::body_full(archive.into()))
            .await
            .map_err(|e| RuntimeError::api(what, e))
    }

    /// Starts a created container. A refused ulimit (no CAP_SYS_RESOURCE for dockerd) becomes
    /// [`RuntimeError::UlimitRefused`] naming the limits asked for.
    pub async fn start(&self, spec: &ContainerSpec) -> Result<(), RuntimeError> {
        match self.docker.start_container(&spec.name, None).await {
            Ok(()) => Ok(()),
            Err(e) => {
                let cause = describe_bollard(&e);
                if cause.contains("rlimit") {
                    let limits: Vec<String> = spec
                        .ulimits
                        .iter()
                        .map(|u| format!("{}={}:{}", u.name, u.soft, u.hard))
                        .collect();
                    Err(RuntimeError::UlimitRefused {
                        container: spec.name.clone(),
                        problem: Problem::new(
                            format!(
                                "the engine may not set these ulimits ({}): {cause}",
                                limits.join(" ")
                            ),
                            super::error::ulimit_fix(&cause),
                        ),
                    })
                } else {
                    Err(RuntimeError::Api {
                        op: format!("start container {}", spec.name),
                        cause,
                    })
                }
            }
        }
    }

    /// Creates and starts; when the start fails the created container is removed again, so a
    /// failed start leaves nothing behind.
    pub async fn run(&self, spec: &ContainerSpec) -> Result<String, RuntimeError> {
        let id = self.create(spec).await?;
        if let Err(start_err) = self.start(spec).await {
            if let Err(rm_err) = self.remove(&spec.name, Duration::ZERO).await {
                tracing::warn!(
                    "{}: could not remove {} after a failed start: {rm_err}",
                    self.node,
                    spec.name
                );
            }
            return Err(start_err);
        }
        Ok(id)
    }

    /// Stops (SIGTERM, then SIGKILL after `grace`) and removes a container. `Ok(false)` when
    /// there was no such container.
    pub async fn remove(&self, name: &str, grace: Duration) -> Result<bool, RuntimeError> {
        let t = i32::try_from(grace.as_secs()).unwrap_or(i32::MAX);
        let stop = StopContainerOptionsBuilder::new().t(t).build();
        // Stopping gives the workload its grace period; the request may take that long.
        let client = self
            .docker
            .clone()
            .with_timeout(REQUEST_TIMEOUT.saturating_add(grace));
        match client.stop_container(name, Some(stop)).await {
            Ok(()) => {}
            Err(e) if matches!(status_of(&e), Some(304)) => {}
            Err(e) if status_of(&e) == Some(404) => return Ok(false),
            Err(e) => return Err(RuntimeError::api(format!("stop container {name}"), e)),
        }
        let rm = RemoveContainerOptionsBuilder::new().force(true).build();
        match self.docker.remove_container(name, Some(rm)).await {
            Ok(()) => Ok(true),
            Err(e) if status_of(&e) == Some(404) => Ok(false),
            // Removal already under way (a concurrent stop).
            Err(e) if status_of(&e) == Some(409) => Ok(true),
            Err(e) => Err(RuntimeError::api(format!("remove container {name}"), e)),
        }
    }

    /// Stops (SIGTERM, then SIGKILL after `grace`) a container and keeps it, with its
    /// configuration, for a later [`Engine::start`] (the supervisor's restart of a group). A
    /// paused container is stopped too. `Ok(false)` when there was no such container.
    pub async fn stop(&self, name: &str, grace: Duration) -> Result<bool, RuntimeError> {
        let t = i32::try_from(grace.as_secs()).unwrap_or(i32::MAX);
        let stop = StopContainerOptionsBuilder::new().t(t).build();
        let client = self
            .docker
            .clone()
            .with_timeout(REQUEST_TIMEOUT.saturating_add(grace));
        match client.stop_container(name, Some(stop)).await {
            Ok(()) => Ok(true),
            Err(e) if matches!(status_of(&e), Some(304)) => Ok(true),
            Err(e) if status_of(&e) == Some(404) => Ok(false),
            Err(e) => Err(RuntimeError::api(format!("stop container {name}"), e)),
        }
    }

    /// Every container carrying spark-launch's job label (of `job` when given), running or
    /// not. Containers without our label are never returned.
    pub async fn labelled(&self, job: Option<&str>) -> Result<Vec<ContainerSummary>, RuntimeError> {
        let label = match job {
            Some(j) => format!("{LABEL_JOB}={j}"),
            None => LABEL_JOB.to_string(),
        };
        let mut filters = HashMap::new();
        filters.insert("label".to_string(), vec![label]);
        let options = ListContainersOptionsBuilder::new()
            .all(true)
            .filters(&filters)
            .build();
        self.docker
            .list_containers(Some(options))
            .await
            .map_err(|e| RuntimeError::api("list containers", e))
    }

    /// The container called `name`, if any (labelled or not).
    pub async fn inspect(
        &self,
        name: &str,
    ) -> Result<Option<ContainerInspectResponse>, RuntimeError> {
        match self
            .docker
            .inspect_container(name, None::<InspectContainerOptions>)
            .await
        {
            Ok(c) => Ok(Some(c)),
            Err(e) if status_of(&e) == Some(404) => Ok(None),
            Err(e) => Err(RuntimeError::api(format!("inspect container {name}"), e)),
        }
    }

    /// Runs `command` in the running container `name` and collects its output, within
    /// `timeout` (the command is left to the container's end if it overruns).
    pub async fn exec(
        &self,
        name: &str,
        command: &[String],
        env: &[String],
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<ExecOutput, RuntimeError> {
        let what = format!("run `{}` in {name}", crate::plan::job::shell_words(command));
        let config = ExecConfig {
            attach_stdout: Some(true),
            attach_stderr: Some(true),
            cmd: Some(command.to_vec()),
            env: if env.is_empty() {
                None
            } else {
                Some(env.to_vec())
            },
            ..Default::default()
        };
        let created = self
            .docker
            .create_exec(name, config)
            .await
            .map_err(|e| RuntimeError::api(what.clone(), e))?;
        let started = self
            .streaming
            .start_exec(
                &created.id,
                Some(bollard::exec::StartExecOptions {
                    detach: false,
                    tty: false,
                    output_capacity: Some(1 << 20),
                }),
            )
            .await
            .map_err(|e| RuntimeError::api(what.clone(), e))?;
        let mut output = match started {
            bollard::exec::StartExecResults::Attached { output, .. } => output,
            bollard::exec::StartExecResults::Detached => {
                return Err(RuntimeError::Other(format!(
                    "{what}: the engine detached the exec"
                )));
            }
        };
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let collect = async {
            while let Some(item) = output.next().await {
                use bollard::container::LogOutput;
                match item {
                    Ok(LogOutput::StdOut { message }) | Ok(LogOutput::Console { message }) => {
                        push_capped(&mut stdout, &message)
                    }
                    Ok(LogOutput::StdErr { message }) => push_capped(&mut stderr, &message),
                    Ok(LogOutput::StdIn { .. }) => {}
                    Err(e) => return Err(RuntimeError::api(what.clone(), e)),
                }
            }
            Ok(())
        };
        tokio::select! {
            r = tokio::time::timeout(timeout, collect) => match r {
                Ok(r) => r?,
                Err(_) => {
                    return Err(RuntimeError::Timeout {
                        what,
                        after: timeout,
                        last: last_line(&stdout, &stderr),
                    })
                }
            },
            _ = cancel.cancelled() => return Err(RuntimeError::Cancelled { what }),
        }
        // The stream ends when the process exits; its exit code may lag a moment behind.
        let exit_code = wait::until(
            &format!("{what}: exit code"),
            Duration::from_secs(10),
            Duration::from_millis(50),
            cancel,
            || async {
                match self.docker.inspect_exec(&created.id).await {
                    Ok(i) if i.running == Some(false) => Probe::Ready(i.exit_code.unwrap_or(-1)),
                    Ok(_) => Probe::NotYet("still running".to_string()),
                    Err(e) => Probe::Abort(RuntimeError::api(what.clone(), e)),
                }
            },
        )
        .await?;
        Ok(ExecOutput {
            exit_code,
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        })
    }

    /// Writes `content` to `path` inside the container `name` (parent folders are created),
    /// through the engine's archive upload: no shell is needed in the image.
    pub async fn write_file(
        &self,
        name: &str,
        path: &str,
        content: &[u8],
        mode: u32,
    ) -> Result<(), RuntimeError> {
        let what = format!("write {path} in {name}");
        self.upload(name, what, [(path, content, mode)]).await
    }

    /// Waits until the container `name` has exited and returns its exit code.
    pub async fn wait_exit(
        &self,
        name: &str,
        timeout: Duration,
        cancel: &CancellationToken,
    ) -> Result<i64, RuntimeError> {
        let what = format!("container {name} to exit");
        wait::until(
            &what,
            timeout,
            Duration::from_millis(500),
            cancel,
            || async {
                match self.inspect(name).await {
                    Ok(Some(c)) => {
                        let state = c.state.unwrap_or_default();
                        if state.running == Some(true) || state.restarting == Some(true) {
                            Probe::NotYet("running".to_string())
                        } else {
                            Probe::Ready(state.exit_code.unwrap_or(-1))
                        }
                    }
                    Ok(None) => Probe::Abort(RuntimeError::Other(format!(
                        "{what}: the container is gone"
                    ))),
                    // A failed round trip is not an answer: ask again until the deadline.
                    Err(e) => Probe::NotYet(format!("cannot ask the engine: {e}")),
                }
            },
        )
        .await
    }

    /// The container's log, from the start; with `follow`, then everything it writes until
    /// it exits.
    pub fn logs(
        &self,
        name: &str,
        follow: bool,
        timestamps: bool,
    ) -> impl Stream<Item = Result<LogChunk, RuntimeError>> + Send + 'static {
        let options = LogsOptionsBuilder::new()
            .follow(follow)
            .stdout(true)
            .stderr(true)
            .timestamps(timestamps)
            .build();
        self.logs_with(name, options)
    }

    /// The container's log from second `since` (Unix time) on, each line stamped by Docker
    /// (RFC 3339 with nanoseconds, then a space), without following it.
    pub fn logs_since(
        &self,
        name: &str,
        since: i32,
    ) -> impl Stream<Item = Result<LogChunk, RuntimeError>> + Send + 'static {
        let options = LogsOptionsBuilder::new()
            .since(since)
            .stdout(true)
            .stderr(true)
            .timestamps(true)
            .build();
        self.logs_with(name, options)
    }

    fn logs_with(
        &self,
        name: &str,
        options: bollard::query_parameters::LogsOptions,
    ) -> impl Stream<Item = Result<LogChunk, RuntimeError>> + Send + 'static {
        let what = format!("read the log of {name}");
        self.streaming.logs(name, Some(options)).map(move |item| {
            use bollard::container::LogOutput;
            match item {
                Ok(LogOutput::StdErr { message }) => Ok(LogChunk {
                    stream: LogStream::Stderr,
                    bytes: message,
                }),
                Ok(LogOutput::StdOut { message })
                | Ok(LogOutput::Console { message })
                | Ok(LogOutput::StdIn { message }) => Ok(LogChunk {
                    stream: LogStream::Stdout,
                    bytes: message,
                }),
                Err(e) => Err(RuntimeError::api(what.clone(), e)),
            }
        })
    }
}

fn push_capped(buf: &mut Vec<u8>, bytes: &[u8]) {
    let room = EXEC_OUTPUT_LIMIT.saturating_sub(buf.len());
    buf.extend_from_slice(&bytes[..bytes.len().min(room)]);
}

fn last_line(stdout: &[u8], stderr: &[u8]) -> String {
    let pick = if stderr.is_empty() { stdout } else { stderr };
    String::from_utf8_lossy(pick)
        .trim_end()
        .lines()
        .last()
        .unwrap_or("no output")
        .to_string()
}
