//! A profile as a launch file's part of a request: its fields as a [`PartialServe`] (each
//! value marked as the profile's), or an nccl-test profile's options; what the user typed
//! beside `up` is laid over it by `workload::partial::layer`, as for every other source. Pure.

use super::Profile;
use crate::plan::JobName;
use crate::workload::endpoint::ApiKeyAsk;
use crate::workload::engines::EngineOptions;
use crate::workload::memory::parse_memory_size;
use crate::workload::nccl_test::{NcclOp, NcclTestOptions, parse_bytes};
use crate::workload::partial::{Given, LaunchAsk, PartialServe};

/// A profile's `api_key`: `auto` or `@FILE`. A key written in the profile itself is refused:
/// profiles are shared and committed, and a key in one is a leaked key.
pub fn profile_key(text: &str) -> Result<ApiKeyAsk, String> {
    match text.parse::<ApiKeyAsk>()? {
        ApiKeyAsk::Given(_) => Err(
            "a key written in a profile is refused (profiles are shared and committed): use `auto` or `@/path/to/a/0600/file`".into(),
        ),
        ask => Ok(ask),
    }
}

/// A profile field the request could not use.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("profile {profile}: {field}: {message}")]
pub struct RequestError {
    pub profile: String,
    pub field: String,
    pub message: String,
}

/// A profile's field, marked as the profile's.
fn field<T>(file: &str, value: T, what: &str) -> Option<Given<T>> {
    Some(Given::file(value, file, format!("the profile's {what}")))
}

impl Profile {
    /// The launch this profile describes; `file` labels its values in messages.
    pub fn ask(&self, file: &str) -> Result<LaunchAsk, RequestError> {
        let err = |field: &str, message: String| RequestError {
            profile: self.name.clone(),
            field: field.to_string(),
            message,
        };
        let job = JobName::new(self.name.clone()).map_err(|e| err("name", e.to_string()))?;
        let Some(engine) = self.engine.serving() else {
            return self.nccl_ask(job);
        };
        let model = self
            .model_source()
            .ok_or_else(|| err("model", "a serving profile needs a model".into()))?;
        Ok(LaunchAsk::Serve(Box::new(PartialServe {
            engine: field(file, engine, "engine"),
            model: field(file, model, "model"),
            job: field(file, job, "name"),
            image: self.image.clone().and_then(|i| field(file, i, "image")),
            port: self.ports.api.and_then(|p| field(file, p, "ports.api")),
            tp: field(file, self.tp, "tp"),
            pp: field(file, self.pp, "pp"),
            // The profile's shape holds: its gpus_per_node, not the drivers' count.
            gpus_per_node: field(file, self.gpus_per_node, "gpus_per_node"),
            ready_timeout_s: self
                .ready_timeout_s
                .and_then(|t| field(file, t, "ready_timeout_s")),
            engine_args: field(file, self.engine_args.clone(), "engine_args"),
            env: self.env.clone(),
            bind: match &self.bind {
                Some(text) => field(file, text.parse().map_err(|e| err("bind", e))?, "bind"),
                None => None,
            },
            memory_limit: match &self.memory_limit {
                Some(text) => field(
                    file,
                    parse_memory_size(text).map_err(|e| err("memory_limit", e))?,
                    "memory_limit",
                ),
                None => None,
            },
            api_key: match &self.api_key {
                Some(text) => field(
                    file,
                    profile_key(text).map_err(|e| err("api_key", e))?,
                    "api_key",
                ),
                None => None,
            },
            nccl_from: match &self.nccl_from {
                Some(text) => field(
                    file,
                    text.parse().map_err(|e| err("nccl_from", e))?,
                    "nccl_from",
                ),
                None => None,
            },
            tuning: self.tuning(),
            ..PartialServe::default()
        })))
    }

    /// What the profile asks of its engine: Ray, the ports, the speculative block, and its
    /// engine's own section (read by the engine). Each engine reads what it has a use for;
    /// validation refused knobs of another engine.
    fn tuning(&self) -> EngineOptions {
        let mut t = EngineOptions {
            ray: self.ray,
            rendezvous_port: self.ports.rendezvous,
            ray_port: self.ports.ray,
            ssh_port: self.ports.ssh,
            speculative: self.speculative.clone(),
            ..EngineOptions::default()
        };
        self.read_section(&mut t);
        t
    }

    /// An nccl-test profile's options (the flags' environment, TCP and container settings are
    /// laid over them by the launch file's request).
    fn nccl_ask(&self, job: JobName) -> Result<LaunchAsk, RequestError> {
        let err = |field: &str, message: String| RequestError {
            profile: self.name.clone(),
            field: field.to_string(),
            message,
        };
        let mut options = NcclTestOptions::new(job);
        if let Some(n) = &self.nccl_test {
            if !n.ops.is_empty() {
                options.ops = n
                    .ops
                    .iter()
                    .enumerate()
                    .map(|(i, op)| {
                        op.parse::<NcclOp>()
                            .map_err(|e| err(&format!("nccl_test.ops[{i}]"), e))
                    })
                    .collect::<Result<_, _>>()?;
            }
            if let Some(b) = &n.min_bytes {
                options.min_bytes = parse_bytes(b).map_err(|e| err("nccl_test.min_bytes", e))?;
            }
            if let Some(b) = &n.max_bytes {
                options.max_bytes = parse_bytes(b).map_err(|e| err("nccl_test.max_bytes", e))?;
            }
            if let Some(i) = n.iters {
                options.iters = i;
            }
        }
        options.image = self.image.clone();
        options.extra_env = self.env.clone();
        Ok(LaunchAsk::NcclTest {
            options: Box::new(options),
            gpus_per_node: self.gpus_per_node,
        })
    }
}
