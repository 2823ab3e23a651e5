//! A profile as a launch request: its fields mapped onto the workload options directly (no
//! argv built and parsed again), with what the user typed beside `up` on top. Pure.

use std::collections::BTreeMap;

use super::Profile;
use crate::plan::JobName;
use crate::plan::spec::EnvVar;
use crate::workload::endpoint::{ApiKeyAsk, Bind};
use crate::workload::engines::EngineOptions;
use crate::workload::launch::{LaunchRequest, NcclTestRequest, ServeRequest};
use crate::workload::memory::{MemoryAsk, parse_memory_size};
use crate::workload::nccl_lib::NcclFrom;
use crate::workload::nccl_test::{NcclOp, NcclTestOptions, parse_bytes};
use crate::workload::run::ContainerOverrides;
use crate::workload::serve::ServeOptions;

/// What the launching flags set over a profile (or over a serving engine's command line).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overrides {
    /// `--job` [default: the profile's name].
    pub job: Option<JobName>,
    /// `--env`, set over the profile's and the derived variables.
    pub env: Vec<EnvVar>,
    pub container: ContainerOverrides,
    /// `--timeout` when given.
    pub ready_timeout_s: Option<u64>,
    /// `--no-stage`: the weights are already on every node.
    pub no_stage: bool,
    /// `--no-check`: ready at the first token, the answers not checked.
    pub no_check: bool,
    pub hf_home: Option<String>,
    /// `--allow-tcp`: run NCCL on sockets rather than refuse a node whose RDMA is unusable.
    pub allow_tcp: bool,
    /// `--nccl-from`, over the profile's `nccl_from`.
    pub nccl_from: Option<NcclFrom>,
    /// `--allow-old-nccl`.
    pub allow_old_nccl: bool,
    /// `--api-key`, over the profile's `api_key`.
    pub api_key: Option<ApiKeyAsk>,
    /// `--bind`, over the profile's `bind`.
    pub bind: Option<Bind>,
    /// `--memory-limit` (over the profile's `memory_limit`) and `--allow-overcommit`.
    pub memory: MemoryAsk,
}

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

impl Profile {
    /// The launch this profile describes, with `o` on top.
    pub fn request(&self, o: &Overrides) -> Result<LaunchRequest, RequestError> {
        let err = |field: &str, message: String| RequestError {
            profile: self.name.clone(),
            field: field.to_string(),
            message,
        };
        let job = match &o.job {
            Some(j) => j.clone(),
            None => JobName::new(self.name.clone()).map_err(|e| err("name", e.to_string()))?,
        };
        let mut env = self.env.clone();
        for e in &o.env {
            env.insert(e.key.clone(), e.value.clone());
        }
        let Some(engine) = self.engine.serving() else {
            return self.nccl_request(job, env, o);
        };
        let model = self
            .model_source()
            .ok_or_else(|| err("model", "a serving profile needs a model".into()))?;
        // The engine's defaults (`ServeOptions::new`), then the profile's fields, then `o`.
        let mut serve = ServeOptions::new(engine, job, model);
        if let Some(image) = &self.image {
            serve.image = image.clone();
        }
        if let Some(port) = self.ports.api {
            serve.port = port;
        }
        if let Some(t) = o.ready_timeout_s.or(self.ready_timeout_s) {
            serve.ready_timeout_s = t;
        }
        serve.tp = self.tp;
        serve.pp = self.pp;
        // The profile's shape holds: its gpus_per_node, not the drivers' count.
        serve.gpus_per_node = self.gpus_per_node;
        serve.engine_args = self.engine_args.clone();
        serve.env = env;
        serve.ulimits = o.container.ulimits.clone();
        serve.gpus = o.container.gpus;
        serve.stage_model = !o.no_stage;
        serve.check_answers = !o.no_check;
        serve.allow_tcp = o.allow_tcp;
        serve.bind = match (o.bind, &self.bind) {
            (Some(b), _) => b,
            (None, Some(text)) => text.parse().map_err(|e| err("bind", e))?,
            (None, None) => Bind::All,
        };
        serve.memory = MemoryAsk {
            limit: match (o.memory.limit, &self.memory_limit) {
                (Some(l), _) => Some(l),
                (None, Some(text)) => {
                    Some(parse_memory_size(text).map_err(|e| err("memory_limit", e))?)
                }
                (None, None) => None,
            },
            allow_overcommit: o.memory.allow_overcommit,
        };
        let api_key = match (&o.api_key, &self.api_key) {
            (Some(k), _) => Some(k.clone()),
            (None, Some(text)) => Some(profile_key(text).map_err(|e| err("api_key", e))?),
            (None, None) => None,
        };
        let nccl_from = match (&o.nccl_from, &self.nccl_from) {
            (Some(f), _) => Some(f.clone()),
            (None, Some(text)) => Some(text.parse().map_err(|e| err("nccl_from", e))?),
            (None, None) => None,
        };
        Ok(LaunchRequest::Serve(Box::new(ServeRequest {
            engine,
            serve,
            tuning: self.tuning(),
            gpus_per_node_given: true,
            hf_home: o.hf_home.clone(),
            nccl_from,
            allow_old_nccl: o.allow_old_nccl,
            api_key,
            recipe: None,
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

    /// An nccl-test profile as `nccl-test`'s request.
    fn nccl_request(
        &self,
        job: JobName,
        env: BTreeMap<String, String>,
        o: &Overrides,
    ) -> Result<LaunchRequest, RequestError> {
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
        options.allow_tcp = o.allow_tcp;
        options.extra_env = env;
        Ok(LaunchRequest::NcclTest(NcclTestRequest {
            options,
            gpus_per_node: Some(self.gpus_per_node),
            overrides: o.container.clone(),
            allow_old_nccl: o.allow_old_nccl,
        }))
    }
}
