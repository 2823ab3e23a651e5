//! Host checks: locked-memory limits, RDMA device nodes, the NVIDIA driver, kernel and CMA,
//! memory and disk, Docker and its GPU runtime, `/etc/nccl.conf`, the nodes' own NCCL.
//!
//! Pure. Fact checks read `HostFacts` from the probe (so they run on snapshots); the Docker,
//! disk and container checks judge what the live gather saw. Versions are compared with the
//! head's: the head is what the user set up first and what the others should match.

use super::check::*;
use super::live::{ContainerState, DockerState, ImageState};
use super::{Check, Inputs};
use crate::derive::NodeInput;
use crate::probe::facts::{MemlockLimit, Observed};

const fn info(id: &'static str, needs: CheckNeeds, title: &'static str) -> CheckInfo {
    CheckInfo {
        id,
        category: Category::Host,
        needs,
        title,
    }
}

pub const CHECKS: &[Check] = &[
    Check {
        info: info(
            "host.memlock",
            CheckNeeds::Facts,
            "memlock unlimited for the user",
        ),
        run: memlock,
    },
    Check {
        info: info(
            "host.container-memlock",
            CheckNeeds::Live,
            "memlock unlimited in a container",
        ),
        run: container_memlock,
    },
    Check {
        info: info(
            "host.infiniband-dev",
            CheckNeeds::Facts,
            "/dev/infiniband present",
        ),
        run: infiniband_dev,
    },
    Check {
        info: info(
            "host.nvidia-driver",
            CheckNeeds::Facts,
            "NVIDIA driver, same version",
        ),
        run: nvidia_driver,
    },
    Check {
        info: info("host.kernel", CheckNeeds::Facts, "same kernel version"),
        run: kernel,
    },
    Check {
        info: info(
            "host.nccl",
            CheckNeeds::Facts,
            "own NCCL, one release (--runtime host)",
        ),
        run: host_nccl,
    },
    Check {
        info: info(
            "host.cma",
            CheckNeeds::Facts,
            "CMA not empty, no KHO pages in it (kho=off)",
        ),
        run: cma,
    },
    Check {
        info: info("host.memory", CheckNeeds::Facts, "free memory"),
        run: memory,
    },
    Check {
        info: info("host.disk", CheckNeeds::Live, "free disk for the image"),
        run: disk,
    },
    Check {
        info: info(
            "host.docker",
            CheckNeeds::Live,
            "Docker reachable by the user",
        ),
        run: docker,
    },
    Check {
        info: info(
            "host.gpu-runtime",
            CheckNeeds::Live,
            "NVIDIA container runtime or CDI",
        ),
        run: gpu_runtime,
    },
    Check {
        info: info(
            "host.nccl-conf",
            CheckNeeds::Facts,
            "no /etc/nccl.conf overrides",
        ),
        run: nccl_conf,
    },
];

const GIB_KIB: u64 = 1024 * 1024;

fn memlock(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    for n in inputs.nodes {
        match n.facts.host.memlock {
            None => e.skip(&n.name, "the snapshot has no `ulimit -l`"),
            Some(MemlockLimit::Unlimited) => {}
            Some(MemlockLimit::Kib(k)) => e.push(Finding::warn(
                &n.name,
                format!("`ulimit -l` is {k} KiB for the user, not unlimited"),
                "RDMA pins every buffer it registers; processes started outside containers (--runtime host, mpirun on the host) fail `ibv_reg_mr` and NCCL falls back to TCP",
                Fix::text(
                    "add `* soft memlock unlimited` and `* hard memlock unlimited` to /etc/security/limits.conf (and `DefaultLimitMEMLOCK=infinity` in /etc/systemd/system.conf for services), then log in again",
                ),
            )),
        }
    }
    e
}

fn container_memlock(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    let Some(image) = &inputs.options.image else {
        for n in inputs.nodes {
            e.skip(&n.name, "pass --image IMAGE to start a test container");
        }
        return e;
    };
    for (n, obs) in inputs.observed_nodes(&mut e) {
        match &obs.container {
            None => {
                let why = match &obs.image {
                    Some(ImageState::Absent) => format!("{image} is not on this node"),
                    _ => "Docker is not usable here (see host.docker)".to_string(),
                };
                e.skip(&n.name, why);
            }
            Some(ContainerState::Ran { memlock, .. }) => match memlock {
                Some(MemlockLimit::Unlimited) => {}
                other => e.push(Finding::fail(
                    &n.name,
                    format!(
                        "inside a container started with `--ulimit memlock=-1`, `ulimit -l` says {}",
                        match other {
                            Some(MemlockLimit::Kib(k)) => format!("{k} KiB"),
                            _ => "nothing readable".to_string(),
                        }
                    ),
                    "NCCL in the container cannot pin its buffers and silently runs on TCP",
                    Fix::text(
                        "let dockerd grant the limit: `LimitMEMLOCK=infinity` in its systemd unit (`sudo systemctl edit docker`), then `sudo systemctl restart docker`",
                    ),
                )),
            },
            Some(ContainerState::Failed { error }) => {
                let rlimit = error.contains("rlimit") || error.contains("operation not permitted");
                e.push(Finding::fail(
                    &n.name,
                    format!(
                        "a test container with `--ulimit memlock=-1` does not start: {error}"
                    ),
                    "every spark-launch GPU container asks for unlimited locked memory (RDMA needs it); the engine refuses to grant it here",
                    if rlimit {
                        Fix::text(
                            "dockerd lacks the right to raise limits (no CAP_SYS_RESOURCE, e.g. rootless or nested Docker): run the jobs on a rootful dockerd, or give its unit `LimitMEMLOCK=infinity`",
                        )
                    } else {
                        Fix::run(
                            "run the same container by hand to see the whole error",
                            [format!(
                                "docker run --rm --ulimit memlock=-1:-1 --entrypoint sh {image} -c 'ulimit -l'"
                            )],
                        )
                    },
                ));
            }
        }
    }
    e
}

/// What to run on a node whose snapshot does not record a fact.
pub const RECAPTURE: &str =
    "capture the node again with `spark-launch probe --capture DIR` (it records";

fn infiniband_dev(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    for n in inputs.nodes {
        let h = &n.facts.host;
        let seen: &[String] = match &h.infiniband_dev_nodes {
            Observed::NotRecorded => {
                e.skip(
                    &n.name,
                    format!(
                        "the snapshot does not record /dev/infiniband: {RECAPTURE} an empty dev/infiniband/ folder when there is none)"
                    ),
                );
                continue;
            }
            Observed::Absent => &[],
            Observed::Present(nodes) => nodes,
        };
        if seen.iter().any(|d| d.starts_with("uverbs")) {
            e.note(&n.name, format!("/dev/infiniband: {}", seen.join(" ")));
            continue;
        }
        let has_rdma = !n.facts.rdma_devices.is_empty();
        e.push(Finding::fail(
            &n.name,
            if seen.is_empty() {
                "/dev/infiniband is missing".to_string()
            } else {
                format!("/dev/infiniband has no uverbs device ({})", seen.join(" "))
            },
            "containers get RDMA through /dev/infiniband/uverbs*; without it NCCL sees no IB device and uses TCP",
            if has_rdma {
                Fix::run(
                    "load the verbs modules so the device nodes appear",
                    ["sudo modprobe ib_uverbs mlx5_ib rdma_ucm".to_string()],
                )
            } else {
                Fix::run(
                    "load the RDMA drivers",
                    ["sudo modprobe mlx5_core mlx5_ib ib_uverbs rdma_ucm".to_string()],
                )
            },
        ));
    }
    e
}

/// Compares one host fact with the head's; `None` values are skipped with `missing`.
fn same_as_head(
    inputs: &Inputs,
    get: impl Fn(&NodeInput) -> Option<&str>,
    missing: &str,
    mut differ: impl FnMut(&mut Evaluation, &NodeInput, &str, &str, &NodeInput),
) -> Evaluation {
    let mut e = Evaluation::default();
    let Some(head) = inputs.head() else { return e };
    let head_value = get(head);
    for n in inputs.nodes {
        match (get(n), head_value) {
            (None, _) => e.skip(&n.name, missing),
            (Some(v), Some(h)) if v != h => differ(&mut e, n, v, h, head),
            (Some(v), _) => e.note(&n.name, v.to_string()),
        }
    }
    e
}

fn nvidia_driver(inputs: &Inputs) -> Evaluation {
    let mut e = same_as_head(
        inputs,
        |n| n.facts.host.nvidia_driver.present().map(String::as_str),
        "",
        |e, n, v, h, head| {
            let major = |s: &str| s.split('.').next().map(str::to_string);
            let problem = format!("NVIDIA driver {v}, but the head {} has {h}", head.name);
            let why = "CUDA, NCCL and the container's user-space driver libraries are built for one driver; mixed drivers fail in ways that look like network bugs";
            let fix = Fix::run(
                format!(
                    "install driver {h} here (or upgrade every node to one version), then reboot"
                ),
                ["nvidia-smi --query-gpu=driver_version --format=csv,noheader".to_string()],
            );
            if major(v) != major(h) {
                e.push(Finding::fail(&n.name, problem, why, fix));
            } else {
                e.push(Finding::warn(&n.name, problem, why, fix));
            }
        },
    );
    // A driver seen missing is a failure, not a skip: GPU containers cannot start. A snapshot
    // that never looked is a skip that says what to capture.
    let missing: Vec<_> = e.skipped.drain(..).map(|(n, _)| n).collect();
    for name in missing {
        let recorded = inputs
            .nodes
            .iter()
            .find(|n| n.name == name)
            .is_some_and(|n| n.facts.host.nvidia_driver.is_recorded());
        if !recorded {
            e.skip(
                &name,
                format!(
                    "the snapshot does not record the NVIDIA driver (sys/module/nvidia): {RECAPTURE} whether the driver is loaded)"
                ),
            );
            continue;
        }
        e.push(Finding::fail(
            &name,
            "no NVIDIA kernel driver is loaded (/sys/module/nvidia/version is missing)",
            "without the driver no GPU container starts and nothing runs on this node",
            Fix::run(
                "install the NVIDIA driver (DGX OS: `sudo apt install nvidia-driver-580-open`), then reboot; check with nvidia-smi",
                ["nvidia-smi".to_string()],
            ),
        ));
    }
    e
}

fn kernel(inputs: &Inputs) -> Evaluation {
    same_as_head(
        inputs,
        |n| n.facts.host.kernel.as_deref(),
        "the snapshot has no kernel version",
        |e, n, v, h, head| {
            e.push(Finding::warn(
                &n.name,
                format!("kernel {v}, but the head {} runs {h}", head.name),
                "RDMA drivers, CMA defaults and the NVIDIA modules follow the kernel; nodes on different kernels behave differently under the same job",
                Fix::text(format!(
                    "update every node to the same kernel ({h} or newer on all), then reboot"
                )),
            ));
        },
    )
}

/// `host.nccl`: the NCCL each node's own processes load (`--runtime host`), as the probe read
/// it: the loader's copy (what nccl-tests' binaries take) and PyTorch's wheel's when torch's
/// RPATH names another; each compared with the head's. A difference is a warning: containers
/// bring their own NCCL (`cluster.image-nccl`), so it breaks only jobs run on the hosts, whose
/// ranks of different releases fail at init or hang. Not recorded, or not read: a skip.
fn host_nccl(inputs: &Inputs) -> Evaluation {
    use crate::libnccl::host::Program;
    use crate::libnccl::{LibVersion, Loads};
    let mut e = Evaluation::default();
    let version = |l: &Loads| l.version().map(|v: &LibVersion| v.version);
    // Per node: the two programs' answers, when read.
    let mut read: Vec<(&NodeInput, Loads, Loads)> = Vec::new();
    for n in inputs.nodes {
        let Some(h) = &n.facts.host.nccl else {
            e.skip(
                &n.name,
                format!(
                    "the snapshot does not record the node's own NCCL (host-nccl.json): {RECAPTURE} what its loader and its python3's torch load)"
                ),
            );
            continue;
        };
        if let Some(err) = &h.error {
            e.skip(
                &n.name,
                format!("reading the node's own NCCL failed: {err}"),
            );
            continue;
        }
        let (plain, torch) = (h.loads(Program::Plain), h.loads(Program::Torch));
        e.note(&n.name, format!("its loader takes {plain}"));
        if h.torch.is_some() {
            e.note(&n.name, format!("its python3's PyTorch takes {torch}"));
        }
        read.push((n, plain, torch));
    }
    let Some(head) = inputs.head() else { return e };
    let head_read = read.iter().find(|(n, _, _)| n.name == head.name);
    for (n, plain, torch) in &read {
        if n.name == head.name {
            continue;
        }
        for (what, mine, theirs) in [
            ("its loader takes", plain, head_read.map(|(_, p, _)| p)),
            (
                "its python3's PyTorch takes",
                torch,
                head_read.map(|(_, _, t)| t),
            ),
        ] {
            let (Some(v), Some(h)) = (version(mine), theirs.and_then(version)) else {
                continue;
            };
            if v == h {
                continue;
            }
            e.push(Finding::warn(
                &n.name,
                format!(
                    "{what} NCCL {v}, but on the head {} it takes {h}",
                    head.name
                ),
                "a job run on the hosts (--runtime host) loads each node's own NCCL, and ranks of different releases fail at init (`NCCL version mismatch`) or hang; containers bring their own and are not affected",
                Fix::text(
                    "install one NCCL release on every node (the same libnccl2 package, or one folder first on LD_LIBRARY_PATH everywhere; the same torch everywhere for PyTorch programs), or run in containers",
                ),
            ));
        }
    }
    e
}

fn cma(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    let mib = |k: u64| k / 1024;
    for n in inputs.nodes {
        let h = &n.facts.host;
        match (h.cma_total_kib, h.cma_free_kib) {
            (None, _) | (_, None) => e.skip(&n.name, "/proc/meminfo has no CmaTotal/CmaFree lines"),
            // No contiguous memory area at all: the kernel regression this check exists for.
            (Some(0), Some(0)) => e.push(Finding::fail(
                &n.name,
                format!(
                    "CMA is empty: CmaTotal 0 MiB on kernel {}",
                    h.kernel.as_deref().unwrap_or("?")
                ),
                "without a contiguous memory area the RDMA stack cannot get the pinned, contiguous buffers it registers, so `ibv_reg_mr` fails with ENOMEM (Cannot allocate memory) and NCCL init dies or falls back to TCP (a known regression of kernels with Kexec HandOver on by default, e.g. Ubuntu HWE kernels on DGX Spark)",
                Fix::run(
                    "turn KHO off: add `kho=off` to GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub, then update grub and reboot; afterwards CmaTotal must not be 0",
                    [
                        "sudo update-grub".to_string(),
                        "grep -i cma /proc/meminfo".to_string(),
                    ],
                ),
            )),
            // More CMA free than there is CMA: pageblocks the kernel's Kexec HandOver scratch
            // area released as MIGRATE_CMA, which CmaTotal does not count.
            (Some(total), Some(free)) if free > total => e.push(Finding::fail(
                &n.name,
                format!(
                    "CMA is not empty where it should be: CmaFree {} MiB against CmaTotal {} MiB on kernel {}",
                    mib(free),
                    mib(total),
                    h.kernel.as_deref().unwrap_or("?")
                ),
                "the kernel's Kexec HandOver (KHO) scratch area ends up as CMA pageblocks; RDMA pins memory long-term and cannot migrate it out of them, so `ibv_reg_mr` fails with ENOMEM (Cannot allocate memory) and NCCL init dies or falls back to TCP (a known regression of kernels with KHO on by default, e.g. Ubuntu HWE 7.0 on DGX Spark)",
                Fix::run(
                    "turn KHO off: add `kho=off` to GRUB_CMDLINE_LINUX_DEFAULT in /etc/default/grub, then update grub and reboot; afterwards CmaFree must not exceed CmaTotal",
                    [
                        "sudo update-grub".to_string(),
                        "grep -i cma /proc/meminfo".to_string(),
                    ],
                ),
            )),
            (Some(total), Some(free)) => e.note(
                &n.name,
                format!("CmaTotal {} MiB, CmaFree {} MiB", mib(total), mib(free)),
            ),
        }
    }
    e
}

fn memory(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    for n in inputs.nodes {
        let h = &n.facts.host;
        let (Some(total), Some(avail)) = (h.mem_total_kib, h.mem_available_kib) else {
            e.skip(&n.name, "the snapshot has no MemTotal/MemAvailable");
            continue;
        };
        let text = format!(
            "{:.1} GiB available of {:.1} GiB",
            avail as f64 / GIB_KIB as f64,
            total as f64 / GIB_KIB as f64
        );
        let why = "model weights, KV cache and NCCL buffers need the memory; on unified-memory machines (DGX Spark) the GPU shares it, so a leftover process shrinks what the model gets";
        let fix = Fix::run(
            "stop leftover jobs and containers (`spark-launch status`, `docker ps`), then drop the page cache",
            ["sudo sh -c 'sync; echo 3 > /proc/sys/vm/drop_caches'".to_string()],
        );
        if avail < 4 * GIB_KIB {
            e.push(Finding::fail(&n.name, format!("only {text}"), why, fix));
        } else if avail * 4 < total {
            e.push(Finding::warn(&n.name, format!("only {text}"), why, fix));
        } else {
            e.note(&n.name, text);
        }
    }
    e
}

fn disk(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    // The image's size, from any node that has it.
    let size =
        inputs
            .nodes
            .iter()
            .find_map(|n| match inputs.observed(&n.name).ok()?.image.as_ref()? {
                ImageState::Present(i) => i.size,
                _ => None,
            });
    for (n, obs) in inputs.observed_nodes(&mut e) {
        let Some(free) = obs.docker_free_kib else {
            e.skip(
                &n.name,
                "Docker's data folder could not be measured (see host.docker)",
            );
            continue;
        };
        let free_gib = free as f64 / GIB_KIB as f64;
        let Some(size) = size else {
            e.note(&n.name, format!("{free_gib:.1} GiB free for Docker images"));
            if inputs.options.image.is_none() {
                e.skip(&n.name, "pass --image IMAGE to compare with its size");
            }
            continue;
        };
        let need_kib = size.div_ceil(1024) * 2;
        let size_gib = size as f64 / (1u64 << 30) as f64;
        if free < need_kib {
            let sev = if free < need_kib / 2 {
                Finding::fail
            } else {
                Finding::warn
            };
            e.push(sev(
                &n.name,
                format!(
                    "{free_gib:.1} GiB free for Docker, the image needs {size_gib:.1} GiB and loading it takes twice that"
                ),
                "an image copy or pull that runs out of space fails half-way and leaves layers behind",
                Fix::run(
                    "free space in Docker's data folder",
                    ["docker system df".to_string(), "docker image prune".to_string()],
                ),
            ));
        } else {
            e.note(
                &n.name,
                format!("{free_gib:.1} GiB free, image {size_gib:.1} GiB"),
            );
        }
    }
    e
}

fn docker(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    for (n, obs) in inputs.observed_nodes(&mut e) {
        let user = obs.user.clone().unwrap_or_else(|| "$USER".into());
        let in_group = obs.groups.iter().any(|g| g == "docker") || user == "root";
        match &obs.docker {
            None => e.skip(&n.name, "Docker was not checked"),
            Some(DockerState::NotInstalled) => e.push(Finding::fail(
                &n.name,
                "the `docker` command is not installed",
                "every spark-launch job runs in containers (or pass --runtime host)",
                Fix::text(
                    "install Docker Engine and the NVIDIA Container Toolkit (DGX OS ships both)",
                ),
            )),
            Some(DockerState::Unreachable { error }) => {
                let denied = error.to_lowercase().contains("permission denied");
                e.push(Finding::fail(
                    &n.name,
                    format!("`docker info` fails for {user}: {error}"),
                    "spark-launch talks to each node's Docker Engine as this user",
                    if denied || !in_group {
                        Fix::run(
                            format!("add {user} to the docker group, then log in again"),
                            [format!(
                                "sudo usermod -aG docker {}",
                                crate::text::shell_word(&user)
                            )],
                        )
                    } else {
                        Fix::run(
                            "start the Docker Engine",
                            ["sudo systemctl enable --now docker".to_string()],
                        )
                    },
                ));
            }
            Some(DockerState::Reachable(info)) => {
                e.note(
                    &n.name,
                    format!(
                        "Docker {} ({})",
                        info.server_version.as_deref().unwrap_or("?"),
                        info.root_dir.as_deref().unwrap_or("?")
                    ),
                );
                if !in_group {
                    e.push(Finding::warn(
                        &n.name,
                        format!("{user} reaches Docker but is not in the docker group"),
                        "access through another route (a socket ACL, a rootless engine) may not survive a reboot or reach the same engine over SSH",
                        Fix::run(
                            format!("add {user} to the docker group, then log in again"),
                            [format!("sudo usermod -aG docker {}", crate::text::shell_word(&user))],
                        ),
                    ));
                }
            }
        }
    }
    e
}

fn gpu_runtime(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    for (n, obs) in inputs.observed_nodes(&mut e) {
        let Some(DockerState::Reachable(info)) = &obs.docker else {
            e.skip(&n.name, "Docker is not usable here (see host.docker)");
            continue;
        };
        let runtime = info.runtimes.iter().any(|r| r == "nvidia");
        if runtime {
            e.note(&n.name, "NVIDIA container runtime registered");
        } else if !obs.cdi_nvidia.is_empty() {
            e.note(
                &n.name,
                format!("CDI: {} (nvidia.com/gpu=all)", obs.cdi_nvidia.join(", ")),
            );
        } else {
            e.push(Finding::fail(
                &n.name,
                "Docker has neither the NVIDIA runtime nor a CDI spec for nvidia.com/gpu",
                "GPU containers cannot be given the GPU: `--gpus all` fails with `could not select device driver`",
                Fix::run(
                    "install the NVIDIA Container Toolkit and register it with Docker",
                    [
                        "sudo nvidia-ctk runtime configure --runtime=docker".to_string(),
                        "sudo nvidia-ctk cdi generate --output=/etc/cdi/nvidia.yaml".to_string(),
                        "sudo systemctl restart docker".to_string(),
                    ],
                ),
            ));
        }
    }
    e
}

/// The `NAME=value` lines of an nccl.conf (comments and blank lines skipped).
pub fn nccl_conf_vars(text: &str) -> Vec<(String, String)> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let (k, v) = l.split_once('=')?;
            Some((k.trim().to_string(), v.trim().to_string()))
        })
        .collect()
}

fn nccl_conf(inputs: &Inputs) -> Evaluation {
    let mut e = Evaluation::default();
    for n in inputs.nodes {
        let mut sources = Vec::new();
        if let Some(c) = n.facts.host.nccl_conf.present() {
            sources.push(("/etc/nccl.conf on the host".to_string(), c.clone()));
        }
        let container_seen = inputs
            .observed(&n.name)
            .is_ok_and(|obs| matches!(obs.container, Some(ContainerState::Ran { .. })));
        if !n.facts.host.nccl_conf.is_recorded() && !container_seen {
            e.skip(
                &n.name,
                format!(
                    "the snapshot does not record /etc/nccl.conf: {RECAPTURE} whether the file exists)"
                ),
            );
            continue;
        }
        if let Ok(obs) = inputs.observed(&n.name)
            && let Some(ContainerState::Ran {
                nccl_conf: Some(c), ..
            }) = &obs.container
        {
            let image = inputs.options.image.as_deref().unwrap_or("the image");
            sources.push((format!("/etc/nccl.conf in {image}"), c.clone()));
        }
        for (where_, text) in sources {
            let vars = nccl_conf_vars(&text);
            e.note(&n.name, format!("{where_}:\n{}", text.trim_end()));
            if vars.is_empty() {
                continue;
            }
            let derived = match inputs.derived {
                Ok(c) => c.node(&n.name).map(|x| &x.env),
                Err(_) => None,
            };
            let (ours, theirs): (Vec<_>, Vec<_>) = vars
                .iter()
                .partition(|(k, _)| derived.is_some_and(|d| d.contains_key(k)));
            let list = |v: &[&(String, String)]| {
                v.iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            };
            let mut problem = format!("{where_} sets {}", list(&theirs));
            if theirs.is_empty() {
                problem = format!("{where_} sets {}", list(&ours));
            }
            if !ours.is_empty() && !theirs.is_empty() {
                problem.push_str(&format!(
                    " (and {}, which spark-launch's own value overrides)",
                    list(&ours)
                ));
            }
            e.push(Finding::warn(
                &n.name,
                problem,
                "NCCL reads /etc/nccl.conf and applies every variable the environment does not set, silently: a forgotten NCCL_IB_HCA, NCCL_NET or NCCL_SOCKET_IFNAME there changes what spark-launch derives for runs outside its jobs, and anything it does not set applies to its jobs too",
                Fix::text(
                    "remove the lines you did not mean to keep (or the file); pass variables you want explicitly instead",
                ),
            ));
        }
    }
    e
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::doctor::Options;
    use crate::doctor::live::{DockerInfo, ImageInfo, Observations};
    use crate::doctor::testkit::*;

    fn with_image() -> Options {
        Options {
            image: Some("vllm:test".into()),
            ..Options::default()
        }
    }

    #[test]
    fn memlock_passes_unlimited_and_warns_a_limit() {
        assert!(facts_eval("host.memlock", &pair()).findings.is_empty());
        let nodes = vec![
            pair().remove(0),
            Node::cabled_spark("spark-b", "192.168.177.12/24")
                .host(|h| h.memlock = Some(MemlockLimit::Kib(8192)))
                .named("spark-b"),
        ];
        let e = facts_eval("host.memlock", &nodes);
        assert_eq!(verdicts(&e), vec![("spark-b".into(), Severity::Warn)]);
        assert!(e.findings[0].problem.fix.text.contains("limits.conf"));
    }

    #[test]
    fn container_memlock_passes_unlimited_fails_a_limit_and_a_refused_start() {
        let ok = live_pair(|_| Observations {
            container: Some(ContainerState::Ran {
                memlock: Some(MemlockLimit::Unlimited),
                nccl_conf: None,
            }),
            ..Default::default()
        });
        assert!(
            live_eval("host.container-memlock", &pair(), &with_image(), &ok)
                .findings
                .is_empty()
        );
        let bad = live_pair(|n| Observations {
            container: Some(if n == "spark-a" {
                ContainerState::Ran {
                    memlock: Some(MemlockLimit::Kib(65536)),
                    nccl_conf: None,
                }
            } else {
                ContainerState::Failed {
                    error: "docker: Error response from daemon: failed to create task for container: error setting rlimits for ready process: error setting rlimit type 8: operation not permitted".into(),
                }
            }),
            ..Default::default()
        });
        let e = live_eval("host.container-memlock", &pair(), &with_image(), &bad);
        assert_eq!(
            verdicts(&e),
            vec![
                ("spark-a".into(), Severity::Fail),
                ("spark-b".into(), Severity::Fail)
            ]
        );
        assert!(e.findings[1].problem.fix.text.contains("CAP_SYS_RESOURCE"));
        // Without --image there is nothing to start: skipped, with the reason.
        let e = live_eval("host.container-memlock", &pair(), &Options::default(), &ok);
        assert_eq!(e.status_of(&name("spark-a")), CheckStatus::Skipped);
    }

    #[test]
    fn infiniband_dev_passes_with_uverbs_and_fails_without() {
        assert!(
            facts_eval("host.infiniband-dev", &pair())
                .findings
                .is_empty()
        );
        let nodes = vec![
            pair().remove(0),
            Node::cabled_spark("spark-b", "192.168.177.12/24")
                .host(|h| h.infiniband_dev_nodes = Observed::Absent)
                .named("spark-b"),
        ];
        let e = facts_eval("host.infiniband-dev", &nodes);
        assert_eq!(verdicts(&e), vec![("spark-b".into(), Severity::Fail)]);
        assert_eq!(e.findings[0].problem.what, "/dev/infiniband is missing");
    }

    #[test]
    fn nvidia_driver_fails_when_missing_or_of_another_major_and_warns_a_minor_difference() {
        assert!(
            facts_eval("host.nvidia-driver", &pair())
                .findings
                .is_empty()
        );
        let with = |v: Option<&str>| {
            let v = Observed::seen(v.map(str::to_string));
            vec![
                pair().remove(0),
                Node::cabled_spark("spark-b", "192.168.177.12/24")
                    .host(move |h| h.nvidia_driver = v)
                    .named("spark-b"),
            ]
        };
        let e = facts_eval("host.nvidia-driver", &with(None));
        assert_eq!(verdicts(&e), vec![("spark-b".into(), Severity::Fail)]);
        let e = facts_eval("host.nvidia-driver", &with(Some("575.57.08")));
        assert_eq!(verdicts(&e), vec![("spark-b".into(), Severity::Fail)]);
        assert_eq!(
            e.findings[0].problem.what,
            "NVIDIA driver 575.57.08, but the head spark-a has 580.95.05"
        );
        let e = facts_eval("host.nvidia-driver", &with(Some("580.126.09")));
        assert_eq!(verdicts(&e), vec![("spark-b".into(), Severity::Warn)]);
    }

    /// A node's own NCCL as on the real GPU machine of the fixtures' README, with the loader's
    /// copy of release `loader`.
    fn own_nccl(loader: &str) -> crate::libnccl::host::HostNccl {
        use crate::libnccl::loader::{Found, Machine, Resolution, Via};
        use crate::libnccl::version::parse_build_string;
        crate::libnccl::host::HostNccl {
            loader: Resolution {
                loads: Some(Found {
                    path: "/usr/lib/aarch64-linux-gnu/libnccl.so.2".into(),
                    file: None,
                    via: Via::LdSoCache,
                    by: None,
                    machine: Machine::Arm64,
                    version: parse_build_string(loader),
                }),
                ..Resolution::default()
            },
            torch: Some(Found {
                path: "/sp/nvidia/nccl/lib/libnccl.so.2".into(),
                file: None,
                via: Via::Rpath,
                by: Some("/sp/torch/lib/libtorch_cuda.so".into()),
                machine: Machine::Arm64,
                version: parse_build_string("2.28.9+cuda12.9"),
            }),
            ..Default::default()
        }
    }

    #[test]
    fn host_nccl_warns_a_node_whose_own_loader_takes_another_release_and_skips_what_was_not_read() {
        let with = |a: Option<&str>, b: Option<&str>| {
            let (a, b) = (a.map(own_nccl), b.map(own_nccl));
            vec![
                Node::cabled_spark("spark-a", "192.168.177.11/24")
                    .host(move |h| h.nccl = a)
                    .named("spark-a"),
                Node::cabled_spark("spark-b", "192.168.177.12/24")
                    .host(move |h| h.nccl = b)
                    .named("spark-b"),
            ]
        };
        let same = facts_eval("host.nccl", &with(Some("2.28.3"), Some("2.28.3")));
        assert!(same.findings.is_empty(), "{same:?}");
        assert_eq!(
            same.notes[0].text,
            "its loader takes NCCL 2.28.3 from /usr/lib/aarch64-linux-gnu/libnccl.so.2 (ld.so.cache)"
        );
        assert_eq!(
            same.notes[1].text,
            "its python3's PyTorch takes NCCL 2.28.9+cuda12.9 from /sp/nvidia/nccl/lib/libnccl.so.2 (RPATH of /sp/torch/lib/libtorch_cuda.so)"
        );
        let e = facts_eval("host.nccl", &with(Some("2.28.3"), Some("2.30.7")));
        assert_eq!(verdicts(&e), vec![("spark-b".into(), Severity::Warn)]);
        assert_eq!(
            e.findings[0].problem.what,
            "its loader takes NCCL 2.30.7, but on the head spark-a it takes 2.28.3"
        );
        // Not recorded (a snapshot of an older capture): a skip saying how to record it.
        let e = facts_eval("host.nccl", &with(Some("2.28.3"), None));
        assert!(e.findings.is_empty());
        assert_eq!(
            e.status_of(&"spark-b".parse().unwrap()),
            CheckStatus::Skipped
        );
        assert!(e.skipped[0].1.contains("host-nccl.json"), "{e:?}");
    }

    #[test]
    fn kernel_warns_a_node_on_another_kernel() {
        assert!(facts_eval("host.kernel", &pair()).findings.is_empty());
        let nodes = vec![
            pair().remove(0),
            Node::cabled_spark("spark-b", "192.168.177.12/24")
                .host(|h| h.kernel = Some("6.17.0-1008-nvidia".into()))
                .named("spark-b"),
        ];
        let e = facts_eval("host.kernel", &nodes);
        assert_eq!(verdicts(&e), vec![("spark-b".into(), Severity::Warn)]);
    }

    #[test]
    fn cma_fails_when_it_is_empty_or_more_is_free_than_reserved_with_kho_off_as_the_fix() {
        // A healthy node reserves some CMA and has at most that much free.
        let e = facts_eval("host.cma", &pair());
        assert!(e.findings.is_empty());
        let with = |total: u64, free: u64| {
            vec![
                pair().remove(0),
                Node::cabled_spark("spark-b", "192.168.177.12/24")
                    .host(|h| {
                        h.cma_total_kib = Some(total);
                        h.cma_free_kib = Some(free);
                        h.kernel = Some("7.0.0-1019-nvidia".into());
                    })
                    .named("spark-b"),
            ]
        };
        // CMA empty: the regression the issue names.
        let e = facts_eval("host.cma", &with(0, 0));
        assert_eq!(verdicts(&e), vec![("spark-b".into(), Severity::Fail)]);
        assert_eq!(
            e.findings[0].problem.what,
            "CMA is empty: CmaTotal 0 MiB on kernel 7.0.0-1019-nvidia"
        );
        assert!(e.findings[0].problem.fix.text.contains("kho=off"));
        // The field report: CmaTotal 0 kB, CmaFree 940604 kB on a 7.0 HWE kernel.
        let e = facts_eval("host.cma", &with(0, 940_604));
        assert_eq!(verdicts(&e), vec![("spark-b".into(), Severity::Fail)]);
        assert_eq!(
            e.findings[0].problem.what,
            "CMA is not empty where it should be: CmaFree 918 MiB against CmaTotal 0 MiB on kernel 7.0.0-1019-nvidia"
        );
        assert!(e.findings[0].problem.fix.text.contains("kho=off"));
    }

    #[test]
    fn memory_fails_when_almost_none_is_available_and_warns_below_a_quarter() {
        assert!(facts_eval("host.memory", &pair()).findings.is_empty());
        let with = |avail: u64| {
            vec![
                pair().remove(0),
                Node::cabled_spark("spark-b", "192.168.177.12/24")
                    .host(move |h| h.mem_available_kib = Some(avail))
                    .named("spark-b"),
            ]
        };
        assert_eq!(
            verdicts(&facts_eval("host.memory", &with(GIB_KIB))),
            vec![("spark-b".into(), Severity::Fail)]
        );
        assert_eq!(
            verdicts(&facts_eval("host.memory", &with(20 * GIB_KIB))),
            vec![("spark-b".into(), Severity::Warn)]
        );
    }

    fn image(size: u64) -> ImageState {
        ImageState::Present(ImageInfo {
            id: "sha256:aa".into(),
            size: Some(size),
            ..Default::default()
        })
    }

    #[test]
    fn disk_needs_twice_the_image_size() {
        let gib = 1u64 << 30;
        let ok = live_pair(|_| Observations {
            docker_free_kib: Some(100 * GIB_KIB),
            image: Some(image(20 * gib)),
            ..Default::default()
        });
        assert!(
            live_eval("host.disk", &pair(), &with_image(), &ok)
                .findings
                .is_empty()
        );
        let low = live_pair(|n| Observations {
            docker_free_kib: Some(if n == "spark-b" {
                30 * GIB_KIB
            } else {
                100 * GIB_KIB
            }),
            image: Some(if n == "spark-b" {
                ImageState::Absent
            } else {
                image(20 * gib)
            }),
            ..Default::default()
        });
        let e = live_eval("host.disk", &pair(), &with_image(), &low);
        assert_eq!(verdicts(&e), vec![("spark-b".into(), Severity::Warn)]);
        assert_eq!(
            e.findings[0].problem.what,
            "30.0 GiB free for Docker, the image needs 20.0 GiB and loading it takes twice that"
        );
    }

    #[test]
    fn docker_fails_unreachable_with_the_group_fix_and_passes_for_a_group_member() {
        let ok = live_pair(|_| Observations {
            user: Some("nvidia".into()),
            groups: vec!["nvidia".into(), "docker".into()],
            docker: Some(DockerState::Reachable(DockerInfo::default())),
            ..Default::default()
        });
        assert!(
            live_eval("host.docker", &pair(), &Options::default(), &ok)
                .findings
                .is_empty()
        );
        let bad = live_pair(|n| Observations {
            user: Some("nvidia".into()),
            groups: vec!["nvidia".into()],
            docker: Some(if n == "spark-a" {
                DockerState::Unreachable {
                    error: "permission denied while trying to connect to the Docker daemon socket at unix:///var/run/docker.sock".into(),
                }
            } else {
                DockerState::NotInstalled
            }),
            ..Default::default()
        });
        let e = live_eval("host.docker", &pair(), &Options::default(), &bad);
        assert_eq!(
            verdicts(&e),
            vec![
                ("spark-a".into(), Severity::Fail),
                ("spark-b".into(), Severity::Fail)
            ]
        );
        assert_eq!(
            e.findings[0].problem.fix.commands,
            vec!["sudo usermod -aG docker nvidia"]
        );
    }

    #[test]
    fn gpu_runtime_accepts_the_nvidia_runtime_or_cdi_and_fails_without_either() {
        let ok = live_pair(|n| Observations {
            docker: Some(DockerState::Reachable(DockerInfo {
                runtimes: if n == "spark-a" {
                    vec!["nvidia".into(), "runc".into()]
                } else {
                    vec!["runc".into()]
                },
                ..Default::default()
            })),
            cdi_nvidia: if n == "spark-b" {
                vec!["nvidia.yaml".into()]
            } else {
                vec![]
            },
            ..Default::default()
        });
        assert!(
            live_eval("host.gpu-runtime", &pair(), &Options::default(), &ok)
                .findings
                .is_empty()
        );
        let bad = live_pair(|_| Observations {
            docker: Some(DockerState::Reachable(DockerInfo {
                runtimes: vec!["runc".into()],
                ..Default::default()
            })),
            ..Default::default()
        });
        let e = live_eval("host.gpu-runtime", &pair(), &Options::default(), &bad);
        assert_eq!(e.findings.len(), 2);
        assert!(
            e.findings[0].problem.fix.commands[0].starts_with("sudo nvidia-ctk runtime configure")
        );
    }

    #[test]
    fn nccl_conf_is_printed_and_warned_when_it_sets_variables() {
        assert!(facts_eval("host.nccl-conf", &pair()).findings.is_empty());
        let nodes = vec![
            pair().remove(0),
            Node::cabled_spark("spark-b", "192.168.177.12/24")
                .host(|h| {
                    h.nccl_conf = Observed::Present(
                        "# site defaults\nNCCL_IB_HCA=mlx5_0\nNCCL_NET=Socket\n".into(),
                    )
                })
                .named("spark-b"),
        ];
        let e = facts_eval("host.nccl-conf", &nodes);
        assert_eq!(verdicts(&e), vec![("spark-b".into(), Severity::Warn)]);
        assert_eq!(
            e.findings[0].problem.what,
            "/etc/nccl.conf on the host sets NCCL_NET=Socket (and NCCL_IB_HCA=mlx5_0, which spark-launch's own value overrides)"
        );
        assert!(e.notes[0].text.contains("NCCL_NET=Socket"));
    }
}
