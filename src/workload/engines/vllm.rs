//! vLLM across nodes: the per-node containers, commands and steps of `spark-launch vllm`.
//!
//! - **native** (default, no Ray): every node runs `vllm serve` with `--nnodes`,
//!   `--node-rank`, `--master-addr`/`--master-port` (the head's control-plane address from
//!   derive) and the multiprocessing backend; workers run `--headless`, the head serves the API.
//! - **ray**: the head container starts a Ray head and waits (inside the container) until Ray
//!   lists every node alive, with its GPUs, at the address derive chose for it
//!   (`VLLM_HOST_IP`/`RAY_NODE_IP_ADDRESS`); only then it runs `vllm serve
//!   --distributed-executor-backend ray`. Worker containers join the Ray head and block.
//!   spark-launch watches the same membership from outside (`WaitRay`) to say which node is
//!   missing or joined from the wrong address.
//!
//! Scripts end with `exec "$@"`: the engine's arguments travel as the container's argv, never
//! re-quoted, so `-- extra args` reach vLLM verbatim.
//!
//! Pure: options and facts in, a `ServePlan` out.

use serde::{Deserialize, Serialize};

use crate::node::{NodeName, Role};
use crate::plan::{JobPlan, Launch, NodePlan, NodePorts, RayMember, RuntimeKind, Step};
use crate::workload::endpoint::{VLLM_API_KEY, bind_addr};
use crate::workload::serve::{
    self, EngineKind, Problem, ServeOptions, ServePlan, ServeRefusal, container, distinct_ports,
    endpoint, path_notes, select,
};

pub const DEFAULT_PORT: u16 = 8000;
/// vLLM's own default rendezvous port for the multiprocessing backend.
pub const DEFAULT_MASTER_PORT: u16 = 29501;
pub const DEFAULT_RAY_PORT: u16 = 6379;
/// How long the head waits inside its container for Ray to list every node.
pub const RAY_JOIN_TIMEOUT_S: u64 = 600;

/// How vLLM's ranks find each other.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum VllmMode {
    Native { master_port: u16 },
    Ray { ray_port: u16 },
}

/// `spark-launch vllm`'s resolved options.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VllmOptions {
    pub serve: ServeOptions,
    pub mode: VllmMode,
}

/// The Python the head runs (inside its container) to list Ray's nodes as JSON:
/// `[{"ip": ..., "alive": ..., "gpus": ...}]`. `WaitRay` runs it too.
pub const RAY_QUERY_PY: &str = r#"import json, ray
ray.init(address="auto", logging_level="ERROR")
print(json.dumps([{"ip": n.get("NodeManagerAddress"), "alive": bool(n.get("Alive")), "gpus": float(n.get("Resources", {}).get("GPU", 0))} for n in ray.nodes()]))
"#;

/// The head container's script in Ray mode. `$SL_RAY_EXPECT` holds the expected members.
const RAY_HEAD_SH: &str = r#"set -eu
echo "spark-launch: starting the Ray head on $VLLM_HOST_IP:$SL_RAY_PORT"
ray start --head --port="$SL_RAY_PORT" --node-ip-address="$VLLM_HOST_IP" --num-gpus="$SL_GPUS" --disable-usage-stats
python3 - <<'PY'
import json, os, sys, time
import ray
want = json.loads(os.environ["SL_RAY_EXPECT"])
deadline = time.time() + float(os.environ.get("SL_RAY_TIMEOUT", "600"))
ray.init(address="auto", logging_level="ERROR")
last = None
while True:
    seen = {n.get("NodeManagerAddress"): float(n.get("Resources", {}).get("GPU", 0))
            for n in ray.nodes() if n.get("Alive")}
    missing = [w for w in want if seen.get(w["ip"], -1) < w["gpus"]]
    state = sorted(seen.items())
    if state != last:
        print("spark-launch: ray: %d/%d nodes: %s" % (len(want) - len(missing), len(want),
              ", ".join("%s (%g GPU)" % kv for kv in state)), flush=True)
        last = state
    if not missing:
        print("spark-launch: ray: cluster complete", flush=True)
        break
    if time.time() > deadline:
        print("spark-launch: ray: ERROR missing %s" % ", ".join("%s at %s" % (w["node"], w["ip"]) for w in missing), flush=True)
        sys.exit(1)
    time.sleep(2)
PY
exec "$@"
"#;

/// A worker container's script in Ray mode: join the head (retrying while it starts), block.
const RAY_WORKER_SH: &str = r#"set -u
for i in $(seq 1 150); do
  ray start --block --address="$SL_RAY_HEAD" --node-ip-address="$VLLM_HOST_IP" --num-gpus="$SL_GPUS" --disable-usage-stats && exit 0
  ray stop --force >/dev/null 2>&1 || true
  sleep 2
done
echo "spark-launch: ERROR could not join the Ray head at $SL_RAY_HEAD" >&2
exit 1
"#;

/// Plans a vLLM job on the first nodes that fit `tp × pp`.
pub fn plan(
    opts: &VllmOptions,
    nodes: &[crate::derive::NodeInput],
) -> Result<ServePlan, ServeRefusal> {
    let o = &opts.serve;
    let mut extra = Vec::new();
    match opts.mode {
        VllmMode::Native { master_port } => extra.extend(distinct_ports(&[
            ("API", o.port),
            ("rendezvous", master_port),
        ])),
        VllmMode::Ray { ray_port } => {
            extra.extend(distinct_ports(&[("API", o.port), ("Ray", ray_port)]))
        }
    }
    extra.extend(reserved_args(&o.engine_args));
    let sel = select(nodes, o, extra)?;
    let n = sel.inputs.len();
    let head_env = &sel.env.nodes[0];
    let bound = bind_addr(o.bind, &sel.inputs[0], head_env)
        .map_err(|p| ServeRefusal { problems: vec![p] })?;
    let (host, local_url) = serve::listen(bound, o.port);
    let head_addr = head_env.control.addr;
    let served = o.model.served_name();
    let model_path = o.model.container_path();
    let mut notes = Vec::new();
    let used: Vec<NodeName> = sel.inputs.iter().map(|i| i.name.clone()).collect();
    if !sel.unused.is_empty() {
        notes.push(format!(
            "tp × pp = {} GPUs use {} of the cluster's {} nodes ({}); {} stay{} idle",
            o.world(),
            n,
            nodes.len(),
            names(&used),
            names(&sel.unused),
            if sel.unused.len() == 1 { "s" } else { "" }
        ));
    }

    let mut node_plans = Vec::new();
    let mut members = Vec::new();
    for (rank, env) in sel.env.nodes.iter().enumerate() {
        let mut spec = container(o, EngineKind::Vllm, env, &sel.rdma, &mut notes);
        if rank == 0 {
            serve::label_bind(&mut spec, bound);
        }
        let mut args = vec![
            "vllm".to_string(),
            "serve".to_string(),
            model_path.clone(),
            "--served-model-name".to_string(),
            served.clone(),
            "--tensor-parallel-size".to_string(),
            o.tp.to_string(),
            "--pipeline-parallel-size".to_string(),
            o.pp.to_string(),
        ];
        let head = env.role == Role::Head;
        if head {
            args.extend([
                "--host".into(),
                host.clone(),
                "--port".into(),
                o.port.to_string(),
            ]);
            // vLLM reads the key from its environment: never on a command line, `<set>` in
            // every printout of the plan.
            if let Some(k) = &o.api_key {
                spec.env
                    .insert(VLLM_API_KEY.to_string(), k.key.expose().to_string());
            }
        }
        match opts.mode {
            VllmMode::Native { master_port } => {
                if n > 1 {
                    args.extend([
                        "--distributed-executor-backend".to_string(),
                        "mp".to_string(),
                        "--nnodes".to_string(),
                        n.to_string(),
                        "--node-rank".to_string(),
                        rank.to_string(),
                        "--master-addr".to_string(),
                        head_addr.to_string(),
                        "--master-port".to_string(),
                        master_port.to_string(),
                    ]);
                    if !head {
                        args.push("--headless".to_string());
                    }
                }
                args.extend(o.engine_args.iter().cloned());
                spec.command = args;
            }
            VllmMode::Ray { ray_port } => {
                members.push(RayMember {
                    node: env.name.clone(),
                    ip: env.control.addr,
                    gpus: o.gpus_per_node,
                });
                spec.env
                    .insert("SL_GPUS".into(), o.gpus_per_node.to_string());
                if head {
                    args.extend([
                        "--distributed-executor-backend".to_string(),
                        "ray".to_string(),
                    ]);
                    args.extend(o.engine_args.iter().cloned());
                    spec.env.insert("SL_RAY_PORT".into(), ray_port.to_string());
                    spec.env
                        .insert("SL_RAY_TIMEOUT".into(), RAY_JOIN_TIMEOUT_S.to_string());
                    let mut command = vec![
                        "bash".to_string(),
                        "-c".to_string(),
                        RAY_HEAD_SH.to_string(),
                        "spark-launch-ray-head".to_string(),
                    ];
                    command.extend(args);
                    spec.command = command;
                } else {
                    spec.env
                        .insert("SL_RAY_HEAD".into(), format!("{head_addr}:{ray_port}"));
                    spec.command = vec![
                        "bash".to_string(),
                        "-c".to_string(),
                        RAY_WORKER_SH.to_string(),
                        "spark-launch-ray-worker".to_string(),
                    ];
                }
            }
        }
        node_plans.push(NodePlan {
            node: env.name.clone(),
            role: env.role,
            launch: Launch::Container(spec),
        });
    }
    if let VllmMode::Ray { .. } = opts.mode
        && let Some(NodePlan {
            launch: Launch::Container(head),
            ..
        }) = node_plans.first_mut()
    {
        head.env.insert(
            "SL_RAY_EXPECT".into(),
            serde_json::to_string(&members).unwrap_or_default(),
        );
    }

    let head_name = used[0].clone();
    let workers: Vec<NodeName> = used[1..].to_vec();
    let (mode, rendezvous) = match opts.mode {
        VllmMode::Native { master_port } => ("native", master_port),
        VllmMode::Ray { ray_port } => ("ray", ray_port),
    };
    let mut steps = vec![Step::CheckPorts {
        ports: used
            .iter()
            .map(|node| NodePorts {
                node: node.clone(),
                ports: if *node == head_name {
                    if n > 1 || mode == "ray" {
                        vec![o.port, rendezvous]
                    } else {
                        vec![o.port]
                    }
                } else {
                    vec![]
                },
            })
            .filter(|p| !p.ports.is_empty())
            .collect(),
    }];
    if !workers.is_empty() {
        steps.push(Step::CheckReachable {
            to: head_name.clone(),
            addr: head_addr,
            port: rendezvous,
            from: workers.clone(),
        });
    }
    steps.push(Step::EnsureImage {
        image: o.image.clone(),
        nodes: used.clone(),
    });
    steps.push(Step::StageModel {
        model: o.model.clone(),
        nodes: used.clone(),
        copy: o.stage_model,
        listing: None,
        routes: Default::default(),
    });
    steps.push(Step::Start {
        nodes: used.clone(),
    });
    if matches!(opts.mode, VllmMode::Ray { .. }) {
        steps.push(Step::WaitRay {
            node: head_name.clone(),
            expect: members,
            timeout_s: RAY_JOIN_TIMEOUT_S,
        });
    }
    steps.push(Step::WaitServing {
        node: head_name.clone(),
        url: local_url,
        model: served.clone(),
        engine: EngineKind::Vllm.to_string(),
        timeout_s: o.ready_timeout_s,
        api_key: o.api_key.as_ref().map(|k| k.key.clone()),
    });
    path_notes(o, &used, &sel.assumed, &mut notes);
    Ok(ServePlan {
        engine: EngineKind::Vllm,
        mode: mode.to_string(),
        model: o.model.clone(),
        served_name: served,
        tp: o.tp,
        pp: o.pp,
        endpoint: endpoint(&sel.inputs[0], head_env, o.port, bound),
        nodes: used,
        unused: sel.unused.clone(),
        notes,
        warnings: serve::warnings(&sel.env),
        sockets: sel.rdma.sockets.clone(),
        job: JobPlan {
            job: o.job.clone(),
            workload: EngineKind::Vllm.to_string(),
            runtime: RuntimeKind::Docker,
            nodes: node_plans,
            steps,
        },
        api_key: o.api_key.clone(),
        nccl: None,
    })
}

use crate::node::join as names;

/// Flags spark-launch sets itself; passing them again in `-- extra args` would contradict the
/// plan (vLLM takes the last one silently).
const RESERVED: [&str; 11] = [
    "--api-key",
    "--tensor-parallel-size",
    "--pipeline-parallel-size",
    "--nnodes",
    "--node-rank",
    "--master-addr",
    "--master-port",
    "--headless",
    "--distributed-executor-backend",
    "--port",
    "--served-model-name",
];

/// Problems for flags in `args` that spark-launch sets itself.
pub fn reserved_args(args: &[String]) -> Vec<Problem> {
    args.iter()
        .filter_map(|a| {
            let flag = a.split('=').next().unwrap_or(a);
            let flag_dashed = flag.replace('_', "-");
            RESERVED.contains(&flag_dashed.as_str()).then(|| Problem {
                problem: format!("extra argument {a} is set by spark-launch itself"),
                fix: match flag_dashed.as_str() {
                    "--tensor-parallel-size" => "use --tp".to_string(),
                    "--pipeline-parallel-size" => "use --pp".to_string(),
                    "--port" => "use --port before `--`".to_string(),
                    "--distributed-executor-backend" => "use --ray for the Ray backend".to_string(),
                    _ => format!("remove {flag}: spark-launch derives it per node"),
                },
            })
        })
        .collect()
}

/// What Ray reported about one node (from [`RAY_QUERY_PY`]'s JSON).
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct RaySeen {
    pub ip: Option<String>,
    pub alive: bool,
    pub gpus: f64,
}

/// Ray's membership against what was intended.
#[derive(Clone, Debug, PartialEq)]
pub enum RayState {
    Complete,
    /// Not yet (or never): what is missing, and nodes at addresses nobody intended.
    Incomplete {
        missing: Vec<String>,
        strangers: Vec<String>,
    },
}

impl RayState {
    /// One line for progress and timeouts.
    pub fn describe(&self) -> String {
        match self {
            RayState::Complete => "every node joined with its GPUs".to_string(),
            RayState::Incomplete { missing, strangers } => {
                let mut s = format!("waiting for {}", missing.join(", "));
                if !strangers.is_empty() {
                    s.push_str(&format!(
                        "; Ray also lists {} — a node that joined from another interface (check VLLM_HOST_IP / RAY_NODE_IP_ADDRESS on it)",
                        strangers.join(", ")
                    ));
                }
                s
            }
        }
    }
}

/// Compares Ray's node list (the query's JSON) with the intended members.
pub fn ray_state(expect: &[RayMember], query_output: &str) -> Result<RayState, String> {
    let json = query_output
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('['))
        .ok_or_else(|| format!("no node list in Ray's answer: {}", query_output.trim()))?;
    let seen: Vec<RaySeen> =
        serde_json::from_str(json).map_err(|e| format!("unreadable Ray node list: {e}"))?;
    let alive: Vec<&RaySeen> = seen.iter().filter(|s| s.alive).collect();
    let mut missing = Vec::new();
    for m in expect {
        let ip = m.ip.to_string();
        match alive.iter().find(|s| s.ip.as_deref() == Some(ip.as_str())) {
            None => missing.push(format!("{} at {ip}", m.node)),
            Some(s) if s.gpus < f64::from(m.gpus) => missing.push(format!(
                "{} at {ip} (Ray sees {} GPU, expected {})",
                m.node, s.gpus, m.gpus
            )),
            Some(_) => {}
        }
    }
    let strangers = alive
        .iter()
        .filter_map(|s| s.ip.clone())
        .filter(|ip| !expect.iter().any(|m| m.ip.to_string() == *ip))
        .collect();
    if missing.is_empty() {
        Ok(RayState::Complete)
    } else {
        Ok(RayState::Incomplete { missing, strangers })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(node: &str, ip: &str) -> RayMember {
        RayMember {
            node: NodeName::new(node).unwrap(),
            ip: ip.parse().unwrap(),
            gpus: 1,
        }
    }

    #[test]
    fn ray_is_complete_when_every_intended_address_is_alive_with_its_gpus() {
        let expect = [member("a", "10.0.0.1"), member("b", "10.0.0.2")];
        let out = r#"[{"ip": "10.0.0.1", "alive": true, "gpus": 1.0}, {"ip": "10.0.0.2", "alive": true, "gpus": 1.0}]"#;
        assert_eq!(ray_state(&expect, out), Ok(RayState::Complete));
    }

    #[test]
    fn a_worker_that_joined_from_the_wrong_interface_is_named() {
        let expect = [member("a", "10.0.0.1"), member("b", "10.0.0.2")];
        let out = "some log line\n[{\"ip\": \"10.0.0.1\", \"alive\": true, \"gpus\": 1}, {\"ip\": \"192.168.1.7\", \"alive\": true, \"gpus\": 1}]";
        let state = ray_state(&expect, out).unwrap();
        let text = state.describe();
        assert!(text.contains("waiting for b at 10.0.0.2"), "{text}");
        assert!(text.contains("192.168.1.7"), "{text}");
    }

    #[test]
    fn a_node_without_its_gpu_is_not_yet_a_member() {
        let expect = [member("a", "10.0.0.1")];
        let out = r#"[{"ip": "10.0.0.1", "alive": true, "gpus": 0}]"#;
        let text = ray_state(&expect, out).unwrap().describe();
        assert!(text.contains("Ray sees 0 GPU"), "{text}");
        assert!(ray_state(&expect, "Traceback ...").is_err());
    }

    #[test]
    fn flags_spark_launch_sets_are_refused_in_extra_args() {
        let p = reserved_args(&[
            "--max-model-len".into(),
            "4096".into(),
            "--tensor_parallel_size=4".into(),
        ]);
        assert_eq!(p.len(), 1);
        assert_eq!(p[0].fix, "use --tp");
    }
}
