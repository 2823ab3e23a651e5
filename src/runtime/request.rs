//! `ContainerSpec` → the exact Docker Engine create request, in one function
//! ([`create_request`]). Pure: no engine is contacted; the GPU decision is made beforehand from
//! the engine's features (`features::gpu_access`) and passed in, so the same spec gives the same
//! bytes on every run and the bodies can be snapshot-tested.

use std::collections::HashMap;

use bollard::models::{
    ContainerCreateBody, DeviceMapping, DeviceRequest, HostConfig, Mount, MountType,
    ResourcesUlimits, RestartPolicy, RestartPolicyNameEnum,
};
use serde::Serialize;

use super::features::GpuAccess;
use crate::plan::spec::{ContainerSpec, IpcMode, LABEL_PORTS, NetworkMode};

/// Everything `POST /containers/create?name=...` receives.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CreateRequest {
    /// The `name` query parameter: `sl-<job>-<node>`.
    pub name: String,
    /// The JSON body.
    pub body: ContainerCreateBody,
}

/// Builds the create request for `spec` with GPUs given as `gpu` says.
///
/// Besides what the spec says, every container gets: `Init` (so signals reach the workload and
/// `stop` is quick even when PID 1 would ignore SIGTERM), no restart policy and no auto-remove
/// (logs outlive the container until `spark-launch stop` removes it), and the ports label.
pub fn create_request(spec: &ContainerSpec, gpu: &GpuAccess) -> CreateRequest {
    let mut labels: HashMap<String, String> = spec
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    if !spec.ports.is_empty() {
        let ports: Vec<String> = spec.ports.iter().map(|p| p.to_string()).collect();
        labels.insert(LABEL_PORTS.to_string(), ports.join(","));
    }
    let env: Vec<String> = spec.env.iter().map(|(k, v)| format!("{k}={v}")).collect();

    let device_requests = match gpu {
        GpuAccess::None => None,
        GpuAccess::DeviceRequest { count } => Some(vec![DeviceRequest {
            driver: Some(String::new()),
            count: Some(*count),
            capabilities: Some(vec![vec!["gpu".to_string()]]),
            ..Default::default()
        }]),
        GpuAccess::Cdi { device_ids } => Some(vec![DeviceRequest {
            driver: Some("cdi".to_string()),
            device_ids: Some(device_ids.clone()),
            ..Default::default()
        }]),
    };

    let host_config = HostConfig {
        network_mode: Some(
            match spec.network {
                NetworkMode::Host => "host",
                NetworkMode::Bridge => "bridge",
            }
            .to_string(),
        ),
        ipc_mode: Some(
            match spec.ipc {
                IpcMode::Host => "host",
                IpcMode::Private => "private",
            }
            .to_string(),
        ),
        cap_add: non_empty(spec.cap_add.clone()),
        security_opt: non_empty(spec.security_opt.clone()),
        ulimits: non_empty(
            spec.ulimits
                .iter()
                .map(|u| ResourcesUlimits {
                    name: Some(u.name.clone()),
                    soft: Some(u.soft),
                    hard: Some(u.hard),
                })
                .collect(),
        ),
        devices: non_empty(
            spec.devices
                .iter()
                .map(|d| DeviceMapping {
                    path_on_host: Some(d.host.clone()),
                    path_in_container: Some(d.container.clone()),
                    cgroup_permissions: Some(d.permissions.clone()),
                })
                .collect(),
        ),
        device_requests,
        mounts: non_empty(
            spec.mounts
                .iter()
                .map(|m| Mount {
                    typ: Some(match m.kind {
                        crate::plan::spec::MountKind::Bind => MountType::BIND,
                        crate::plan::spec::MountKind::Volume => MountType::VOLUME,
                    }),
                    source: Some(m.source.clone()),
                    target: Some(m.target.clone()),
                    read_only: Some(m.read_only),
                    ..Default::default()
                })
                .collect(),
        ),
        // Memory and swap equal: no swap beyond the limit, so a container past it is
        // OOM-killed rather than swapping the host into the ground.
        memory: spec.memory_limit.and_then(|b| i64::try_from(b).ok()),
        memory_swap: spec.memory_limit.and_then(|b| i64::try_from(b).ok()),
        init: Some(true),
        auto_remove: Some(false),
        restart_policy: Some(RestartPolicy {
            name: Some(RestartPolicyNameEnum::NO),
            maximum_retry_count: None,
        }),
        ..Default::default()
    };

    let body = ContainerCreateBody {
        image: Some(spec.image.clone()),
        entrypoint: spec.entrypoint.clone(),
        cmd: non_empty(spec.command.clone()),
        env: non_empty(env),
        labels: Some(labels),
        working_dir: spec.workdir.clone(),
        tty: Some(false),
        open_stdin: Some(false),
        host_config: Some(host_config),
        ..Default::default()
    };
    CreateRequest {
        name: spec.name.clone(),
        body,
    }
}

fn non_empty<T>(v: Vec<T>) -> Option<Vec<T>> {
    if v.is_empty() { None } else { Some(v) }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::{NodeName, Role};
    use crate::plan::{Gpus, JobName};

    fn gpu_spec(has_ib: bool) -> ContainerSpec {
        let job = JobName::new("nccl-test").unwrap();
        let node = NodeName::new("spark-1d84").unwrap();
        let mut s = ContainerSpec::gpu(
            &job,
            &node,
            Role::Head,
            "nvcr.io/nvidia/pytorch:25.09-py3",
            has_ib,
        );
        s.command = vec!["sleep".into(), "infinity".into()];
        s.env
            .insert("NCCL_IB_HCA".into(), "rocep1s0f1,roceP2p1s0f1".into());
        s.env
            .insert("NCCL_SOCKET_IFNAME".into(), "enp1s0f1np1".into());
        s.mount_hf_cache("/home/nvidia/.cache/huggingface");
        s.ports = vec![8000, 2233];
        s
    }

    fn body(req: &CreateRequest) -> serde_json::Value {
        serde_json::to_value(req).unwrap()
    }

    #[test]
    fn a_gpu_container_with_the_nvidia_runtime_uses_a_device_request_for_all_gpus() {
        let req = create_request(&gpu_spec(true), &GpuAccess::DeviceRequest { count: -1 });
        insta::assert_json_snapshot!(body(&req));
    }

    #[test]
    fn a_gpu_container_on_a_cdi_engine_asks_for_nvidia_gpu_all() {
        let req = create_request(
            &gpu_spec(false),
            &GpuAccess::Cdi {
                device_ids: vec!["nvidia.com/gpu=all".into()],
            },
        );
        insta::assert_json_snapshot!(body(&req));
    }

    #[test]
    fn a_security_option_reaches_the_host_config_and_none_is_sent_without_one() {
        let mut s = gpu_spec(true);
        let plain = create_request(&s, &GpuAccess::DeviceRequest { count: -1 });
        assert_eq!(body(&plain)["body"]["HostConfig"].get("SecurityOpt"), None);
        s.security_opt.push("seccomp=unconfined".into());
        let req = create_request(&s, &GpuAccess::DeviceRequest { count: -1 });
        assert_eq!(
            body(&req)["body"]["HostConfig"]["SecurityOpt"],
            serde_json::json!(["seccomp=unconfined"])
        );
    }

    #[test]
    fn a_serving_container_binds_its_nodes_runtime_cache_read_write_beside_the_hugging_face_cache()
    {
        // As `workload::runtime_cache` puts it into every rank (its tests check that part).
        let mut s = gpu_spec(true);
        let folder = "/home/nvidia/.cache/spark-launch/runtime/vllm/Qwen--Qwen2.5-0.5B-Instruct/nvcr.io-nvidia-vllm-26.04-py3-9796488a";
        s.mounts.push(crate::plan::spec::Mount {
            source: folder.into(),
            target: "/var/cache/spark-launch".into(),
            read_only: false,
            kind: crate::plan::spec::MountKind::Bind,
        });
        s.env.insert(
            "TRITON_CACHE_DIR".into(),
            "/var/cache/spark-launch/triton".into(),
        );
        s.labels
            .insert(crate::plan::spec::LABEL_RUNTIME_CACHE.into(), folder.into());
        let req = create_request(&s, &GpuAccess::DeviceRequest { count: -1 });
        insta::assert_json_snapshot!(body(&req));
    }

    #[test]
    fn a_plain_container_gets_no_gpus_devices_or_ulimits() {
        let job = JobName::new("demo").unwrap();
        let node = NodeName::new("n1").unwrap();
        let mut s = ContainerSpec::new(&job, &node, Role::Worker, "sl-base:test");
        s.command = vec!["sleep".into(), "1000".into()];
        assert_eq!(s.gpus, Gpus::None);
        let req = create_request(&s, &GpuAccess::None);
        insta::assert_json_snapshot!(body(&req));
    }

    #[test]
    fn a_memory_limit_sets_docker_s_memory_and_swap_limits_equal() {
        let mut s = gpu_spec(true);
        s.memory_limit = Some(121_385_703_424);
        let req = create_request(&s, &GpuAccess::DeviceRequest { count: -1 });
        let b = body(&req);
        assert_eq!(b["body"]["HostConfig"]["Memory"], 121_385_703_424i64);
        assert_eq!(b["body"]["HostConfig"]["MemorySwap"], 121_385_703_424i64);
        // Without a limit, neither is sent (Docker's default: unlimited).
        let b = body(&create_request(&gpu_spec(true), &GpuAccess::None));
        assert!(b["body"]["HostConfig"].get("Memory").is_none(), "{b}");
        assert!(b["body"]["HostConfig"].get("MemorySwap").is_none(), "{b}");
    }

    #[test]
    fn a_count_of_gpus_is_passed_through_as_the_device_request_count() {
        let req = create_request(&gpu_spec(false), &GpuAccess::DeviceRequest { count: 2 });
        let v = body(&req);
        assert_eq!(v["body"]["HostConfig"]["DeviceRequests"][0]["Count"], 2);
        assert_eq!(v["body"]["HostConfig"]["DeviceRequests"][0]["Driver"], "");
        assert_eq!(
            v["body"]["HostConfig"]["DeviceRequests"][0]["Capabilities"],
            serde_json::json!([["gpu"]])
        );
    }

    #[test]
    fn a_secret_reaches_the_create_body_while_the_printed_plan_shows_set() {
        let mut spec = gpu_spec(true);
        spec.env.insert("HF_TOKEN".into(), "hf_real".into());
        let req = create_request(&spec, &GpuAccess::None);
        let env = req.body.env.clone().unwrap_or_default();
        assert!(env.contains(&"HF_TOKEN=hf_real".to_string()), "{env:?}");
        let printed = serde_json::to_string(&spec).unwrap();
        assert!(printed.contains(r#""HF_TOKEN":"<set>""#), "{printed}");
        assert!(!printed.contains("hf_real"));
    }
}
