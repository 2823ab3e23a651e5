//! Compose files: the same `ContainerSpec`s the launcher would start, written as one
//! `docker compose` file per node, for users who prefer to run things by hand.
//!
//! Nothing is lost in translation: image, entrypoint, command, environment, labels, host
//! network and IPC, GPUs (`deploy.resources.reservations.devices`, what `--gpus all` means),
//! devices, capabilities, limits and mounts. Compose interpolates `$VAR` in every string, so
//! every `$` of a command or value is written `$$`; a mount source under `~` becomes
//! `${HOME}/…` (the home of whoever runs compose on that node).
//!
//! Pure: a plan in, file names and texts out.

use yaml_serde::{Mapping, Sequence, Value};

use crate::node::{NodeName, Role};
use crate::plan::spec::{IpcMode, NetworkMode};
use crate::plan::{ContainerSpec, Gpus, JobPlan, Launch};

/// One compose file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ComposeFile {
    pub node: NodeName,
    pub role: Role,
    /// `NODE.compose.yaml`.
    pub file_name: String,
    pub text: String,
}

fn s(v: &str) -> Value {
    Value::String(v.to_string())
}

/// `$` → `$$`: compose must pass the text through untouched.
pub fn escape(v: &str) -> String {
    v.replace('$', "$$")
}

fn strings(items: &[String]) -> Value {
    Value::Sequence(items.iter().map(|i| s(&escape(i))).collect())
}

fn source(path: &str) -> String {
    match path.strip_prefix("~/") {
        Some(rest) => format!("${{HOME}}/{}", escape(rest)),
        None if path == "~" => "${HOME}".to_string(),
        None => escape(path),
    }
}

/// The compose service of one container.
pub fn service(spec: &ContainerSpec) -> Value {
    let mut m = Mapping::new();
    m.insert(s("container_name"), s(&spec.name));
    m.insert(s("image"), s(&spec.image));
    if let Some(e) = &spec.entrypoint {
        m.insert(s("entrypoint"), strings(e));
    }
    if !spec.command.is_empty() {
        m.insert(s("command"), strings(&spec.command));
    }
    if !spec.env.is_empty() {
        let mut env = Mapping::new();
        for (k, v) in &spec.env {
            env.insert(s(k), s(&escape(v)));
        }
        m.insert(s("environment"), Value::Mapping(env));
    }
    let mut labels = Mapping::new();
    for (k, v) in &spec.labels {
        labels.insert(s(k), s(&escape(v)));
    }
    m.insert(s("labels"), Value::Mapping(labels));
    match spec.network {
        NetworkMode::Host => m.insert(s("network_mode"), s("host")),
        NetworkMode::Bridge => m.insert(s("network_mode"), s("bridge")),
    };
    match spec.ipc {
        IpcMode::Host => m.insert(s("ipc"), s("host")),
        IpcMode::Private => m.insert(s("ipc"), s("private")),
    };
    if !spec.cap_add.is_empty() {
        m.insert(s("cap_add"), strings(&spec.cap_add));
    }
    if !spec.ulimits.is_empty() {
        let mut u = Mapping::new();
        for l in &spec.ulimits {
            let mut lim = Mapping::new();
            lim.insert(s("soft"), Value::Number(l.soft.into()));
            lim.insert(s("hard"), Value::Number(l.hard.into()));
            u.insert(s(&l.name), Value::Mapping(lim));
        }
        m.insert(s("ulimits"), Value::Mapping(u));
    }
    if !spec.devices.is_empty() {
        let d: Vec<String> = spec
            .devices
            .iter()
            .map(|d| format!("{}:{}:{}", d.host, d.container, d.permissions))
            .collect();
        m.insert(s("devices"), strings(&d));
    }
    if !spec.mounts.is_empty() {
        let mut vols = Sequence::new();
        for mount in &spec.mounts {
            let mut v = Mapping::new();
            v.insert(s("type"), s("bind"));
            v.insert(s("source"), s(&source(&mount.source)));
            v.insert(s("target"), s(&escape(&mount.target)));
            v.insert(s("read_only"), Value::Bool(mount.read_only));
            vols.push(Value::Mapping(v));
        }
        m.insert(s("volumes"), Value::Sequence(vols));
    }
    let count = match spec.gpus {
        Gpus::None => None,
        Gpus::All => Some(s("all")),
        Gpus::Count(n) => Some(Value::Number(n.into())),
    };
    if let Some(count) = count {
        let mut dev = Mapping::new();
        dev.insert(s("driver"), s("nvidia"));
        dev.insert(s("count"), count);
        dev.insert(s("capabilities"), Value::Sequence(vec![s("gpu")]));
        let mut reservations = Mapping::new();
        reservations.insert(s("devices"), Value::Sequence(vec![Value::Mapping(dev)]));
        let mut resources = Mapping::new();
        resources.insert(s("reservations"), Value::Mapping(reservations));
        let mut deploy = Mapping::new();
        deploy.insert(s("resources"), Value::Mapping(resources));
        m.insert(s("deploy"), Value::Mapping(deploy));
    }
    if let Some(w) = &spec.workdir {
        m.insert(s("working_dir"), s(&escape(w)));
    }
    // Logs outlive the container, as with the launcher: nothing restarts or removes it.
    m.insert(s("restart"), s("no"));
    Value::Mapping(m)
}

/// One compose file per node of the plan (containers only; host processes have none).
pub fn files(plan: &JobPlan, header: &str) -> Vec<ComposeFile> {
    plan.nodes
        .iter()
        .filter_map(|n| {
            let Launch::Container(spec) = &n.launch else {
                return None;
            };
            let mut services = Mapping::new();
            services.insert(s(plan.workload.as_str()), service(spec));
            let mut root = Mapping::new();
            root.insert(s("name"), s(&spec.name));
            root.insert(s("services"), Value::Mapping(services));
            let body = yaml_serde::to_string(&Value::Mapping(root)).unwrap_or_default();
            let mut text = String::new();
            for line in header.lines() {
                text.push_str(&format!("# {line}\n").replace("# \n", "#\n"));
            }
            text.push_str(&format!(
                "# node {} ({}): run on that node with `docker compose -f {}.compose.yaml up -d`\n",
                n.node, n.role, n.node
            ));
            text.push_str(&body);
            Some(ComposeFile {
                node: n.node.clone(),
                role: n.role,
                file_name: format!("{}.compose.yaml", n.node),
                text,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::JobName;

    #[test]
    fn dollars_are_doubled_and_home_becomes_an_interpolation() {
        assert_eq!(escape("exec \"$@\""), "exec \"$$@\"");
        assert_eq!(source("~/.cache/huggingface"), "${HOME}/.cache/huggingface");
        assert_eq!(source("/data/$x"), "/data/$$x");
    }

    #[test]
    fn a_gpu_container_keeps_every_setting_in_its_service() {
        let job = JobName::new("demo").unwrap();
        let node = NodeName::new("spark").unwrap();
        let mut spec = ContainerSpec::gpu(&job, &node, Role::Head, "img:1", true);
        spec.command = vec!["bash".into(), "-c".into(), "echo $HOME".into()];
        spec.env.insert("A".into(), "1".into());
        let v = service(&spec);
        assert_eq!(v["network_mode"], "host");
        assert_eq!(v["ipc"], "host");
        assert_eq!(v["command"][2], "echo $$HOME");
        assert_eq!(v["ulimits"]["memlock"]["soft"], -1);
        assert_eq!(v["devices"][0], "/dev/infiniband:/dev/infiniband:rwm");
        assert_eq!(
            v["deploy"]["resources"]["reservations"]["devices"][0]["count"],
            "all"
        );
        assert_eq!(v["labels"]["dev.spark-launch.job"], "demo");
    }
}
