//! Making and removing a simulated cluster: [`make`] carries out a [`SimPlan`] step by step,
//! one status line each (the plan's step titles), and [`remove`] takes away everything a
//! [`DownPlan`] found. Decides nothing: the plan names every namespace, address, folder and
//! image.
//!
//! The programs it starts (the harness, the image builder) run in process groups of their
//! own, so a Ctrl-C on the terminal reaches spark-launch only: it ends the running step's
//! programs itself (SIGTERM to their group), then `sim up` removes what was made. Their output
//! goes to a log in the private assets folder; a failed step shows its last lines.

use std::io::Write as _;
use std::os::unix::fs::{OpenOptionsExt as _, PermissionsExt as _};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use tokio_util::sync::CancellationToken;

use super::assets::{Assets, MODEL_FILES};
use super::plan::{DownPlan, NODE_UID, RECORD, SIM_ROOT, SimPlan, SimRecord, nodes_root};
use super::{SimError, step_error};
use crate::node::{NodeName, for_each_node};
use crate::progress::Reporter;
use crate::resolve::{self, Selection};
use crate::runtime::{Engine, EngineEndpoint, RuntimeError, image};
use crate::ssh::Pool;
use crate::ssh::trust::establish;

/// How long the stand-in Hub may take to answer after it started.
const HUB_READY: Duration = Duration::from_secs(20);

/// Makes everything `plan` says, in order; on a failed step or Ctrl-C, removes what was made
/// and returns why.
pub async fn make(
    plan: &SimPlan,
    assets: &Assets,
    reporter: &Arc<dyn Reporter>,
    cancel: &CancellationToken,
) -> Result<(), SimError> {
    let result = steps(plan, assets, reporter, cancel).await;
    if result.is_err() {
        let step = reporter.step(&format!("Remove what was made of {}", plan.name));
        let removed = match remove(&DownPlan::of(plan), assets).await {
            Ok(()) => tidy_roots().await,
            Err(e) => Err(e),
        };
        match removed {
            Ok(()) => step.ok(),
            Err(e) => {
                step.fail("");
                reporter.warn(&format!(
                    "could not remove everything ({e}): run `spark-launch sim down --name {}`",
                    plan.name
                ));
            }
        }
    }
    result
}

async fn steps(
    plan: &SimPlan,
    assets: &Assets,
    reporter: &Arc<dyn Reporter>,
    cancel: &CancellationToken,
) -> Result<(), SimError> {
    let title = |i: usize| plan.steps.get(i).cloned().unwrap_or_default();
    let log = assets.path().join("steps.log");

    let step = reporter.step(&title(0));
    start_nodes(plan, assets, &log, cancel).await?;
    step.ok();

    let step = reporter.step(&title(1));
    keys(plan, &log, cancel).await?;
    step.ok();

    let step = reporter.step(&title(2));
    write_private(
        &plan.cluster_file,
        plan.cluster_text()
            .map_err(|e| step_error(&title(2), e))?
            .as_bytes(),
    )
    .map_err(|e| step_error(&title(2), e))?;
    step.ok();

    interrupted(cancel)?;
    // `trust` says its own steps.
    trust(plan, reporter).await?;

    interrupted(cancel)?;
    let step = reporter.step(&title(4));
    build_image(plan, assets, &log, cancel).await?;
    step.ok();

    interrupted(cancel)?;
    let step = reporter.step(&title(5));
    tag_everywhere(plan).await?;
    step.ok();

    interrupted(cancel)?;
    let step = reporter.step(&title(6));
    start_hub(plan, assets).await?;
    step.ok();
    Ok(())
}

/// Claims the sim's names: its folder (made alone: should it exist already, made since the
/// plan looked, nothing is claimed and nothing will be removed) with the record of the plan,
/// so the next `sim up` sees its network taken. Called under [`super::host::lock`].
pub fn claim(plan: &SimPlan) -> Result<(), SimError> {
    folders(plan).map_err(|e| step_error("make the sim's folder", e))?;
    let record = SimRecord {
        plan: plan.clone(),
        created_at: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
    };
    let json = serde_json::to_string_pretty(&record).map_err(|e| step_error("record", e))?;
    write_private(&plan.folder.join(RECORD), json.as_bytes())
        .map_err(|e| step_error("write the record", e))
}

fn interrupted(cancel: &CancellationToken) -> Result<(), SimError> {
    if cancel.is_cancelled() {
        Err(SimError::Interrupted)
    } else {
        Ok(())
    }
}

/// The sims' root (0700: keys and the nodes' Docker data live under it) and this sim's folder.
fn folders(plan: &SimPlan) -> std::io::Result<()> {
    for dir in [Path::new(SIM_ROOT), &nodes_root()] {
        if !dir.exists() {
            std::fs::create_dir_all(dir)?;
            std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        }
    }
    std::fs::create_dir(&plan.folder)?;
    std::fs::set_permissions(&plan.folder, std::fs::Permissions::from_mode(0o700))
}

/// A new file only its owner reads.
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)
}

/// Runs a program in a process group of its own, its output appended to `log`; on Ctrl-C its
/// group gets SIGTERM and the step fails as interrupted.
async fn run(
    what: &str,
    mut cmd: tokio::process::Command,
    log: &Path,
    cancel: &CancellationToken,
) -> Result<(), SimError> {
    let out = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(log)
        .map_err(|e| step_error(what, e))?;
    let err = out.try_clone().map_err(|e| step_error(what, e))?;
    let start = std::fs::metadata(log).map(|m| m.len()).unwrap_or(0);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .process_group(0);
    let mut child = cmd.spawn().map_err(|e| step_error(what, e))?;
    let status = tokio::select! {
        s = child.wait() => s.map_err(|e| step_error(what, e))?,
        _ = cancel.cancelled() => {
            if let Some(pid) = child.id() {
                let _ = nix::sys::signal::killpg(
                    nix::unistd::Pid::from_raw(pid as i32),
                    nix::sys::signal::Signal::SIGTERM,
                );
            }
            let _ = child.wait().await;
            return Err(SimError::Interrupted);
        }
    };
    if status.success() {
        return Ok(());
    }
    let text = std::fs::read(log).unwrap_or_default();
    let tail: Vec<&str> = std::str::from_utf8(&text[(start as usize).min(text.len())..])
        .unwrap_or("")
        .lines()
        .rev()
        .take(15)
        .collect();
    let tail: Vec<&str> = tail.into_iter().rev().collect();
    Err(SimError::Step {
        step: what.to_string(),
        cause: format!(
            "{status}:\n    {}",
            crate::text::printable_lines(&tail.join("\n    "))
        ),
    })
}

/// The harness, with the sims' root and the nodes' user.
fn simnet(assets: &Assets) -> tokio::process::Command {
    let mut cmd = tokio::process::Command::new("bash");
    cmd.arg(assets.simnet())
        .env("SIMNET_ROOT", nodes_root())
        .env("SIMNET_USER", super::plan::NODE_USER)
        .env("SIMNET_UID", NODE_UID.to_string());
    cmd
}

async fn start_nodes(
    plan: &SimPlan,
    assets: &Assets,
    log: &Path,
    cancel: &CancellationToken,
) -> Result<(), SimError> {
    let [a, b, c, _] = plan.mgmt_net.network().octets();
    let mut cmd = simnet(assets);
    cmd.args(["up", &plan.prefix, &plan.nodes.len().to_string()])
        .args(["--services", "sshd,dockerd"])
        .args(["--mgmt-net", &format!("{a}.{b}.{c}")])
        .args(["--cabling", &plan.cabling])
        .arg("--host-link")
        // Nobody logs in with a password: spark-launch uses its key, the nodes theirs. A
        // random one, never kept, so no one else on this machine can guess their way in.
        .env("SIMNET_PASSWORD", random_hex(24));
    run(&plan.steps[0], cmd, log, cancel).await
}

/// `n` random bytes as hex, from the kernel.
fn random_hex(n: usize) -> String {
    let mut bytes = vec![0u8; n];
    let _ = std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes));
    crate::digest::hex(&bytes)
}

/// spark-launch's own key for the nodes, in every node user's `authorized_keys`; the nodes'
/// host keys under their names in the sim's known-hosts file.
async fn keys(plan: &SimPlan, log: &Path, cancel: &CancellationToken) -> Result<(), SimError> {
    let what = &plan.steps[1];
    let mut cmd = tokio::process::Command::new("ssh-keygen");
    cmd.args(["-q", "-t", "ed25519", "-N", ""])
        .args(["-C", &format!("spark-launch-sim@{}", plan.name)])
        .arg("-f")
        .arg(&plan.identity);
    run(what, cmd, log, cancel).await?;
    let pub_key = std::fs::read_to_string(plan.identity.with_extension("pub"))
        .map_err(|e| step_error(what, e))?;
    let mut known = String::new();
    for (i, node) in plan.nodes.iter().enumerate() {
        let dir = plan.nodes_folder.join(format!("n{}", i + 1));
        let ssh = dir.join("home").join(&plan.user).join(".ssh");
        std::fs::create_dir_all(&ssh).map_err(|e| step_error(what, e))?;
        std::fs::set_permissions(&ssh, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| step_error(what, e))?;
        let authorized = ssh.join("authorized_keys");
        std::fs::write(&authorized, &pub_key).map_err(|e| step_error(what, e))?;
        std::fs::set_permissions(&authorized, std::fs::Permissions::from_mode(0o600))
            .map_err(|e| step_error(what, e))?;
        for p in [&ssh, &authorized] {
            std::os::unix::fs::chown(p, Some(NODE_UID), Some(NODE_UID))
                .map_err(|e| step_error(what, e))?;
        }
        let host_key = std::fs::read_to_string(dir.join("state/ssh_host_ed25519_key.pub"))
            .map_err(|e| step_error(what, e))?;
        let mut words = host_key.split_whitespace();
        let (Some(kind), Some(key)) = (words.next(), words.next()) else {
            return Err(step_error(what, format!("{}: no host key", node.name)));
        };
        known.push_str(&format!("{} {kind} {key}\n", node.name));
    }
    write_private(&plan.known_hosts, known.as_bytes()).map_err(|e| step_error(what, e))
}

/// `spark-launch trust` between the nodes, through the cluster file just written: its key,
/// its known hosts, its addresses.
async fn trust(plan: &SimPlan, reporter: &Arc<dyn Reporter>) -> Result<(), SimError> {
    let what = &plan.steps[3];
    let selection = Selection {
        cluster_file: plan.cluster_file.clone(),
        ..Selection::default()
    };
    let (targets, opts) = resolve::ssh_links(&selection, "sim up")
        .await
        .map_err(|e| step_error(what, e))?;
    let pool = Pool::new(opts).map_err(|e| step_error(what, e))?;
    pool.scope(async |pool| {
        let failed = pool.connect_all(&targets, None).await;
        if let Some((node, e)) = failed.first() {
            return Err(step_error(what, format!("{node}: {e}")));
        }
        let report = establish(pool, &targets, reporter, false).await;
        let bad: Vec<String> = report
            .failed
            .iter()
            .map(|(n, why)| format!("{n}: {why}"))
            .chain(report.matrix.iter().filter_map(|p| {
                p.outcome
                    .as_ref()
                    .err()
                    .map(|why| format!("{} -> {}: {why}", p.from, p.to))
            }))
            .collect();
        if bad.is_empty() {
            Ok(())
        } else {
            Err(step_error(what, bad.join("; ")))
        }
    })
    .await
}

async fn build_image(
    plan: &SimPlan,
    assets: &Assets,
    log: &Path,
    cancel: &CancellationToken,
) -> Result<(), SimError> {
    let Some(head) = plan.nodes.first() else {
        return Err(step_error(&plan.steps[4], "no node"));
    };
    let mut cmd = tokio::process::Command::new("bash");
    cmd.arg(assets.build_image())
        .arg("--no-ray")
        .arg(&plan.image.build)
        .arg(format!("unix://{}", head.docker_socket.display()));
    run(&plan.steps[4], cmd, log, cancel).await
}

/// The image on every node (streamed from the head's engine into each other's, as `image
/// push` does between engines), under every name of the plan.
async fn tag_everywhere(plan: &SimPlan) -> Result<(), SimError> {
    let what = plan.steps[5].clone();
    let connect = |i: usize| {
        let node = plan.nodes[i].clone();
        async move { Engine::connect(&node.name, EngineEndpoint::unix(&node.docker_socket)).await }
    };
    let head = connect(0).await.map_err(|e| step_error(&what, e))?;
    let head = &head;
    let names: Vec<NodeName> = plan.nodes.iter().map(|n| n.name.clone()).collect();
    let results = for_each_node(names, 0, |name| {
        let i = plan.nodes.iter().position(|n| n.name == name).unwrap_or(0);
        async move {
            let engine = if i == 0 {
                None
            } else {
                let engine = connect(i).await?;
                let tar = image::export(head, &plan.image.build)
                    .map(|r| r.map_err(|e| std::io::Error::other(e.to_string())));
                image::import(&engine, tar).await?;
                Some(engine)
            };
            let engine = engine.as_ref().unwrap_or(head);
            for t in &plan.image.tags {
                image::tag(engine, &plan.image.build, t).await?;
            }
            Ok::<(), RuntimeError>(())
        }
    })
    .await;
    let bad: Vec<String> = results
        .into_iter()
        .filter_map(|(n, r)| r.err().map(|e| format!("{n}: {e}")))
        .collect();
    if bad.is_empty() {
        Ok(())
    } else {
        Err(step_error(&what, bad.join("; ")))
    }
}

/// The Hub's files (the model under `ORG/NAME/`, its script beside them), then the Hub in the
/// bridges' namespace, on the management network; waits until it answers.
async fn start_hub(plan: &SimPlan, assets: &Assets) -> Result<(), SimError> {
    let what = plan.steps[6].clone();
    let err = |e: std::io::Error| step_error(&what, e);
    for model in &plan.hub.models {
        let dir = plan.hub.folder.join(model);
        std::fs::create_dir_all(&dir).map_err(err)?;
        for (name, text) in MODEL_FILES {
            std::fs::write(dir.join(name), text).map_err(err)?;
        }
    }
    let script = plan.folder.join("hub_standin.py");
    std::fs::copy(assets.hub(), &script).map_err(err)?;
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&plan.hub.log)
        .map_err(err)?;
    let log2 = log.try_clone().map_err(err)?;
    // `setsid -f`: the Hub outlives this command, in a session of its own; `sim down` ends
    // it with every process in the sim's namespaces.
    let status = tokio::process::Command::new("ip")
        .args(["netns", "exec", &format!("{}br", plan.prefix)])
        .args(["setsid", "-f", "/usr/bin/python3", "-u"])
        .arg(&script)
        .arg(plan.hub.address.to_string())
        .arg(plan.hub.port.to_string())
        .arg(&plan.hub.folder)
        .stdin(Stdio::null())
        .stdout(Stdio::from(log))
        .stderr(Stdio::from(log2))
        .status()
        .await
        .map_err(err)?;
    if !status.success() {
        return Err(step_error(&what, format!("could not start it ({status})")));
    }
    let Some(model) = plan.hub.models.first() else {
        return Ok(());
    };
    let url = crate::runtime::http::HttpUrl::parse(&format!(
        "{}/api/models/{model}/revision/main",
        plan.hub.url
    ))
    .map_err(|e| step_error(&what, e))?;
    let deadline = Instant::now() + HUB_READY;
    loop {
        let answer = crate::runtime::http::get(&url, Duration::from_secs(2)).await;
        if answer == crate::runtime::http::HttpAnswer::Status(200) {
            return Ok(());
        }
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(&plan.hub.log).unwrap_or_default();
            return Err(step_error(
                &what,
                format!(
                    "no answer within {}s ({answer:?}); its log:\n    {}",
                    HUB_READY.as_secs(),
                    crate::text::printable_lines(
                        &log.lines()
                            .rev()
                            .take(10)
                            .collect::<Vec<_>>()
                            .join("\n    ")
                    )
                ),
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Removes everything `down` found: the harness ends every process in the sim's namespaces
/// (the nodes' sshd and dockerd with their containers, the Hub), unmounts and deletes the
/// namespaces, this machine's link and the nodes' folder (their Docker data, every image
/// loaded there with it); then the sim's own folder goes (cluster file, key, known hosts, the
/// Hub's files, the record), and the sims' root when nothing else is left in it.
pub async fn remove(down: &DownPlan, assets: &Assets) -> Result<(), SimError> {
    let what = format!("remove {}", down.name);
    if !down.namespaces.is_empty() || down.host_link.is_some() || down.nodes_folder.is_some() {
        let mut cmd = simnet(assets);
        cmd.args(["down", &down.prefix]);
        let out = cmd
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| step_error(&what, e))?;
        if !out.status.success() {
            return Err(step_error(
                &what,
                String::from_utf8_lossy(&out.stderr).trim().to_string(),
            ));
        }
    }
    if let Some(folder) = &down.folder {
        match std::fs::remove_dir_all(folder) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(step_error(&what, format!("{}: {e}", folder.display()))),
        }
    }
    Ok(())
}

/// Removes the sims' roots when no sim is left in them (never anything else's).
pub async fn tidy_roots() -> Result<(), SimError> {
    let _lock = super::host::lock()
        .await
        .map_err(|e| step_error("lock the sims' folder", e))?;
    for dir in [nodes_root(), PathBuf::from(SIM_ROOT)] {
        let _ = std::fs::remove_dir(&dir);
    }
    Ok(())
}
