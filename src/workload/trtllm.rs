//! TensorRT-LLM across nodes: containers running sshd on port 2233, a hostfile, and `mpirun …
//! trtllm-llmapi-launch trtllm-serve` from the head container, with the LLM-API options file
//! generated from flags and profiles.
//!
//! SSH between containers uses the nodes' own identities, as `spark-launch trust` set them up:
//! each container's sshd presents its node's host key (mounted read-only) and accepts the keys
//! in its node user's `authorized_keys`; the head's ssh client uses its node user's key and
//! checks host keys against the known hosts `trust` pinned by node name (`HostKeyAlias`), never
//! `StrictHostKeyChecking no`. Each container writes its own derived environment to
//! `~/.ssh/environment` (sshd `PermitUserEnvironment`), so every MPI rank runs with the
//! variables of the node it runs on — `mpirun -x` would copy the head's interface names to
//! every worker.
//!
//! Pure: options and facts in, a `ServePlan` out.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::serve::{
    self, Engine, Problem, ServeOptions, ServePlan, ServeRefusal, container, distinct_ports,
    endpoint, path_notes, select,
};
use crate::derive::NodeInput;
use crate::node::{NodeName, Role};
use crate::plan::spec::Mount;
use crate::plan::{JobPlan, Launch, NodePlan, NodePorts, RuntimeKind, Step};

pub const DEFAULT_PORT: u16 = 8355;
pub const DEFAULT_SSH_PORT: u16 = 2233;
/// Where spark-launch's files live inside the containers.
pub const RUN_DIR: &str = "/run/spark-launch";
const HOST_SSH: &str = "/run/spark-launch/host-ssh";
const HOST_KEYS: &str = "/run/spark-launch/host-keys";

/// The LLM-API options (`--extra_llm_api_options FILE`), as NVIDIA's DGX Spark playbook sets
/// them unless told otherwise.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LlmApiOptions {
    /// `kv_cache_config.free_gpu_memory_fraction`: the share of free GPU memory for the KV cache.
    pub kv_cache_free_gpu_memory_fraction: f64,
    /// `cuda_graph_config.enable_padding`.
    pub cuda_graph_padding: bool,
    pub disable_overlap_scheduler: bool,
    pub print_iter_log: bool,
    /// More keys, merged over the above (from a profile's `trtllm_options`).
    #[serde(default)]
    pub extra: BTreeMap<String, yaml_serde::Value>,
}

impl Default for LlmApiOptions {
    fn default() -> Self {
        LlmApiOptions {
            kv_cache_free_gpu_memory_fraction: 0.9,
            cuda_graph_padding: true,
            disable_overlap_scheduler: true,
            print_iter_log: false,
            extra: BTreeMap::new(),
        }
    }
}

impl LlmApiOptions {
    /// The YAML file's text.
    pub fn to_yaml(&self) -> String {
        use yaml_serde::{Mapping, Value};
        let mut root = Mapping::new();
        root.insert("print_iter_log".into(), Value::Bool(self.print_iter_log));
        let mut kv = Mapping::new();
        kv.insert("dtype".into(), "auto".into());
        kv.insert(
            "free_gpu_memory_fraction".into(),
            Value::Number(self.kv_cache_free_gpu_memory_fraction.into()),
        );
        root.insert("kv_cache_config".into(), Value::Mapping(kv));
        let mut cg = Mapping::new();
        cg.insert(
            "enable_padding".into(),
            Value::Bool(self.cuda_graph_padding),
        );
        root.insert("cuda_graph_config".into(), Value::Mapping(cg));
        root.insert(
            "disable_overlap_scheduler".into(),
            Value::Bool(self.disable_overlap_scheduler),
        );
        for (k, v) in &self.extra {
            merge(&mut root, k, v);
        }
        yaml_serde::to_string(&Value::Mapping(root)).unwrap_or_default()
    }

    pub fn problems(&self) -> Vec<Problem> {
        let f = self.kv_cache_free_gpu_memory_fraction;
        if f > 0.0 && f <= 1.0 {
            Vec::new()
        } else {
            vec![Problem {
                problem: format!("kv cache fraction {f} is outside (0, 1]"),
                fix: "use e.g. --kv-cache-fraction 0.9 (the share of free GPU memory for the KV cache)".into(),
            }]
        }
    }
}

/// Merges `value` at `key`: mappings merge key by key, anything else replaces.
fn merge(root: &mut yaml_serde::Mapping, key: &str, value: &yaml_serde::Value) {
    use yaml_serde::Value;
    let k = Value::String(key.to_string());
    match (root.get_mut(&k), value) {
        (Some(Value::Mapping(existing)), Value::Mapping(add)) => {
            for (ak, av) in add {
                if let Some(ak) = ak.as_str() {
                    merge(existing, ak, av);
                }
            }
        }
        _ => {
            root.insert(k, value.clone());
        }
    }
}

/// `spark-launch trtllm`'s resolved options.
#[derive(Clone, Debug, PartialEq)]
pub struct TrtllmOptions {
    pub serve: ServeOptions,
    pub ssh_port: u16,
    pub llm_api: LlmApiOptions,
    pub max_batch_size: Option<u32>,
    pub max_num_tokens: Option<u32>,
}

/// Every container's start: sshd with the node's identities. Workers then block; the head
/// waits for every worker's sshd and runs `"$@"` (mpirun).
const ENTRY_SH: &str = r#"set -eu
D=/run/spark-launch
mkdir -p "$D" /run/sshd /root/.ssh
chmod 700 /root/.ssh
SSHD=$(command -v sshd || echo /usr/sbin/sshd)
[ -x "$SSHD" ] || { echo "spark-launch: ERROR this image has no sshd (openssh-server): MPI between containers needs it; use an image that has it" >&2; exit 1; }
for f in id_ed25519 id_ecdsa id_rsa; do
  [ -f "$SL_HOST_SSH/$f" ] && install -m 600 "$SL_HOST_SSH/$f" "/root/.ssh/$f"
done
[ -f "$SL_HOST_SSH/authorized_keys" ] || { echo "spark-launch: ERROR no $SL_HOST_SSH/authorized_keys: run spark-launch trust" >&2; exit 1; }
install -m 600 "$SL_HOST_SSH/authorized_keys" /root/.ssh/authorized_keys
cat "$SL_HOST_SSH"/known_hosts* > /root/.ssh/known_hosts 2>/dev/null || :
env | grep -E '^(NCCL_|UCX_|OMPI_|GLOO_|TP_|MASTER_|HF_|CUDA_|TRTLLM_|TLLM_|PATH=|LD_LIBRARY_PATH=)' > /root/.ssh/environment || :
cat > "$D/sshd_config" <<EOF
Port $SL_SSH_PORT
ListenAddress $SL_SSH_LISTEN
HostKey $SL_HOST_KEYS/ssh_host_ed25519_key
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
AuthorizedKeysFile /root/.ssh/authorized_keys
PermitUserEnvironment yes
UsePAM no
PidFile $D/sshd.pid
EOF
"$SSHD" -f "$D/sshd_config" -E "$D/sshd.log"
echo "spark-launch: sshd listening on $SL_SSH_LISTEN:$SL_SSH_PORT"
if [ -n "${SL_WORKERS:-}" ]; then
  printf '%s\n' "$SL_HOSTFILE" > "$D/hostfile"
  printf '%s\n' "$SL_SSH_CONFIG" > "$D/ssh_config"
  printf '%s\n' "$SL_LLM_API_OPTIONS" > "$D/extra-llm-api-options.yaml"
  for h in $SL_WORKERS; do
    n=0
    until ssh -F "$D/ssh_config" -o ConnectTimeout=5 "$h" true 2>"$D/ssh.err"; do
      n=$((n + 1))
      if [ "$n" -ge 90 ]; then
        echo "spark-launch: ERROR cannot ssh from the head container to $h:$SL_SSH_PORT: $(tail -n1 "$D/ssh.err")" >&2
        exit 1
      fi
      sleep 2
    done
    echo "spark-launch: $h answers on ssh port $SL_SSH_PORT"
  done
fi
exec "$@"
"#;

/// Plans a TensorRT-LLM job on the first nodes that fit `tp × pp`.
pub fn plan(opts: &TrtllmOptions, nodes: &[NodeInput]) -> Result<ServePlan, ServeRefusal> {
    let o = &opts.serve;
    let mut extra = distinct_ports(&[("API", o.port), ("ssh", opts.ssh_port)]);
    extra.extend(opts.llm_api.problems());
    extra.extend(reserved_args(&o.engine_args));
    let sel = select(nodes, o, extra)?;
    let n = sel.inputs.len();
    let used: Vec<NodeName> = sel.inputs.iter().map(|i| i.name.clone()).collect();
    let head_env = &sel.env.nodes[0];
    let model_path = o.model.container_path();
    let mut notes = Vec::new();
    if !sel.unused.is_empty() {
        notes.push(format!(
            "tp × pp = {} GPUs use {} of the cluster's {} nodes; {} stay idle",
            o.world(),
            n,
            nodes.len(),
            sel.unused
                .iter()
                .map(|n| n.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }

    let options_file = format!("{RUN_DIR}/extra-llm-api-options.yaml");
    let mut serve_args = vec![
        "trtllm-serve".to_string(),
        model_path.clone(),
        "--tp_size".to_string(),
        o.tp.to_string(),
    ];
    if o.pp > 1 {
        serve_args.extend(["--pp_size".to_string(), o.pp.to_string()]);
    }
    serve_args.extend([
        "--host".to_string(),
        "0.0.0.0".to_string(),
        "--port".to_string(),
        o.port.to_string(),
        "--backend".to_string(),
        "pytorch".to_string(),
        "--extra_llm_api_options".to_string(),
        options_file,
    ]);
    if let Some(b) = opts.max_batch_size {
        serve_args.extend(["--max_batch_size".to_string(), b.to_string()]);
    }
    if let Some(t) = opts.max_num_tokens {
        serve_args.extend(["--max_num_tokens".to_string(), t.to_string()]);
    }
    serve_args.extend(o.engine_args.iter().cloned());

    let hostfile: Vec<String> = sel
        .env
        .nodes
        .iter()
        .map(|e| format!("{} slots={}", e.control.addr, o.gpus_per_node))
        .collect();
    let ssh_config: Vec<String> = sel.env.nodes[1..]
        .iter()
        .map(|e| {
            format!(
                "Host {addr}\n  HostKeyAlias {name}\n  Port {port}\n  User root\n  BatchMode yes\n  StrictHostKeyChecking yes\n  UserKnownHostsFile /root/.ssh/known_hosts",
                addr = e.control.addr,
                name = e.name,
                port = opts.ssh_port
            )
        })
        .collect();
    let workers: Vec<String> = sel.env.nodes[1..]
        .iter()
        .map(|e| e.control.addr.to_string())
        .collect();

    let mut node_plans = Vec::new();
    for (input, env) in sel.inputs.iter().zip(&sel.env.nodes) {
        let mut spec = container(o, Engine::Trtllm, env, input, &mut notes);
        spec.env.insert("OMPI_ALLOW_RUN_AS_ROOT".into(), "1".into());
        spec.env
            .insert("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM".into(), "1".into());
        if n == 1 {
            spec.env
                .insert("SL_LLM_API_OPTIONS".into(), opts.llm_api.to_yaml());
            spec.command = vec![
                "bash".into(),
                "-c".into(),
                "mkdir -p /run/spark-launch && printf '%s\\n' \"$SL_LLM_API_OPTIONS\" > /run/spark-launch/extra-llm-api-options.yaml && exec \"$@\"".into(),
                "spark-launch-trtllm".into(),
            ];
            spec.command.extend(serve_args.clone());
        } else {
            let paths = o.paths_of(&env.name);
            spec.mounts.push(Mount {
                source: paths.ssh_dir.clone(),
                target: HOST_SSH.to_string(),
                read_only: true,
            });
            spec.mounts.push(Mount {
                source: "/etc/ssh/ssh_host_ed25519_key".to_string(),
                target: format!("{HOST_KEYS}/ssh_host_ed25519_key"),
                read_only: true,
            });
            spec.env.insert("SL_HOST_SSH".into(), HOST_SSH.into());
            spec.env.insert("SL_HOST_KEYS".into(), HOST_KEYS.into());
            spec.env
                .insert("SL_SSH_PORT".into(), opts.ssh_port.to_string());
            spec.env
                .insert("SL_SSH_LISTEN".into(), env.control.addr.to_string());
            let mut command = vec!["bash".to_string(), "-c".to_string(), ENTRY_SH.to_string()];
            if env.role == Role::Head {
                spec.env.insert("SL_WORKERS".into(), workers.join(" "));
                spec.env.insert("SL_HOSTFILE".into(), hostfile.join("\n"));
                spec.env
                    .insert("SL_SSH_CONFIG".into(), ssh_config.join("\n"));
                spec.env
                    .insert("SL_LLM_API_OPTIONS".into(), opts.llm_api.to_yaml());
                command.push("spark-launch-trtllm-head".to_string());
                command.extend([
                    "mpirun".to_string(),
                    "--allow-run-as-root".to_string(),
                    "-np".to_string(),
                    o.world().to_string(),
                    "--hostfile".to_string(),
                    format!("{RUN_DIR}/hostfile"),
                    "--mca".to_string(),
                    "plm_rsh_args".to_string(),
                    format!("-F {RUN_DIR}/ssh_config"),
                    "--bind-to".to_string(),
                    "none".to_string(),
                    "trtllm-llmapi-launch".to_string(),
                ]);
                command.extend(serve_args.clone());
            } else {
                command.push("spark-launch-trtllm-worker".to_string());
                command.extend(["sleep".to_string(), "infinity".to_string()]);
            }
            spec.command = command;
        }
        node_plans.push(NodePlan {
            node: env.name.clone(),
            role: env.role,
            launch: Launch::Container(spec),
        });
    }

    let head_name = used[0].clone();
    let mut steps = vec![Step::CheckPorts {
        ports: sel
            .env
            .nodes
            .iter()
            .map(|e| NodePorts {
                node: e.name.clone(),
                ports: match (e.role, n) {
                    (_, 1) => vec![o.port],
                    (Role::Head, _) => vec![o.port, opts.ssh_port],
                    (Role::Worker, _) => vec![opts.ssh_port],
                },
            })
            .collect(),
    }];
    for e in &sel.env.nodes[1..] {
        steps.push(Step::CheckReachable {
            to: e.name.clone(),
            addr: e.control.addr,
            port: opts.ssh_port,
            from: vec![head_name.clone()],
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
    });
    steps.push(Step::Start {
        nodes: used.clone(),
    });
    steps.push(Step::WaitServing {
        node: head_name,
        url: format!("http://127.0.0.1:{}", o.port),
        model: model_path.clone(),
        engine: Engine::Trtllm.to_string(),
        timeout_s: o.ready_timeout_s,
    });
    path_notes(o, &used, &mut notes);
    Ok(ServePlan {
        engine: Engine::Trtllm,
        mode: if n == 1 { "single" } else { "mpi" }.to_string(),
        model: o.model.clone(),
        served_name: model_path,
        tp: o.tp,
        pp: o.pp,
        endpoint: endpoint(&sel.inputs[0], head_env, o.port),
        nodes: used,
        unused: sel.unused.clone(),
        notes,
        warnings: serve::warnings(&sel.env),
        job: JobPlan {
            job: o.job.clone(),
            workload: Engine::Trtllm.to_string(),
            runtime: RuntimeKind::Docker,
            nodes: node_plans,
            steps,
        },
    })
}

/// Problems for flags in `args` that spark-launch sets itself.
pub fn reserved_args(args: &[String]) -> Vec<Problem> {
    const RESERVED: [&str; 6] = [
        "--tp_size",
        "--pp_size",
        "--host",
        "--port",
        "--extra_llm_api_options",
        "--backend",
    ];
    args.iter()
        .filter_map(|a| {
            let flag = a.split('=').next().unwrap_or(a).replace('-', "_");
            let flag = format!("--{}", flag.trim_start_matches('_'));
            RESERVED.contains(&flag.as_str()).then(|| Problem {
                problem: format!("extra argument {a} is set by spark-launch itself"),
                fix: match flag.as_str() {
                    "--tp_size" => "use --tp".into(),
                    "--pp_size" => "use --pp".into(),
                    "--extra_llm_api_options" => {
                        "use --kv-cache-fraction / --no-cuda-graph-padding, or a profile's trtllm_options".into()
                    }
                    _ => format!("remove {a}"),
                },
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_options_file_matches_the_spark_playbook_by_default_and_merges_extras() {
        let mut o = LlmApiOptions::default();
        let text = o.to_yaml();
        let v: yaml_serde::Value = yaml_serde::from_str(&text).unwrap();
        assert_eq!(v["kv_cache_config"]["free_gpu_memory_fraction"], 0.9);
        assert_eq!(v["kv_cache_config"]["dtype"], "auto");
        assert_eq!(v["cuda_graph_config"]["enable_padding"], true);
        assert_eq!(v["disable_overlap_scheduler"], true);
        o.extra.insert(
            "kv_cache_config".into(),
            yaml_serde::from_str("{enable_block_reuse: false}").unwrap(),
        );
        o.extra
            .insert("enable_attention_dp".into(), yaml_serde::Value::Bool(true));
        let v: yaml_serde::Value = yaml_serde::from_str(&o.to_yaml()).unwrap();
        assert_eq!(v["kv_cache_config"]["free_gpu_memory_fraction"], 0.9);
        assert_eq!(v["kv_cache_config"]["enable_block_reuse"], false);
        assert_eq!(v["enable_attention_dp"], true);
    }

    #[test]
    fn an_impossible_kv_cache_fraction_is_refused() {
        let o = LlmApiOptions {
            kv_cache_free_gpu_memory_fraction: 1.5,
            ..Default::default()
        };
        assert_eq!(o.problems().len(), 1);
    }

    #[test]
    fn flags_spark_launch_sets_are_refused_in_extra_args() {
        let p = reserved_args(&[
            "--tp_size=4".into(),
            "--max_seq_len".into(),
            "--port".into(),
        ]);
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].fix, "use --tp");
    }
}
