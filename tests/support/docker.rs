//! Test support for the runtime tests: names unique to this test run, a tiny
//! busybox image built here (no registry is reachable; CI starts with no images), and guards
//! that remove what a test created even when it fails. Never touches anything it did not create.
#![allow(dead_code)]

use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};

use bollard::Docker;
use bollard::query_parameters::CreateImageOptionsBuilder;
use futures::StreamExt;

/// The host's own engine.
pub const HOST_SOCKET: &str = "/var/run/docker.sock";

/// A prefix unique to this test process: `sl4-<pid>-<n>`.
pub fn unique(tag: &str) -> String {
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "sl4{tag}{}x{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// A root filesystem holding busybox-static and a link for each of its applets, as a tar.
/// Fails loudly when busybox-static is missing (CI installs it).
pub fn busybox_rootfs_tar() -> Vec<u8> {
    let path = ["/bin/busybox", "/usr/bin/busybox"]
        .into_iter()
        .find(|p| std::path::Path::new(p).exists())
        .expect("busybox-static is needed to build the test image: apt-get install busybox-static");
    let binary = std::fs::read(path).expect("read busybox");
    let list = Command::new(path)
        .arg("--list")
        .output()
        .expect("busybox --list");
    let mut b = tar::Builder::new(Vec::new());
    let dir = |b: &mut tar::Builder<Vec<u8>>, name: &str| {
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Directory);
        h.set_mode(0o755);
        h.set_size(0);
        b.append_data(&mut h, name, &[][..]).unwrap();
    };
    for d in ["bin", "tmp", "etc", "proc", "sys", "dev", "root"] {
        dir(&mut b, d);
    }
    let mut h = tar::Header::new_gnu();
    h.set_size(binary.len() as u64);
    h.set_mode(0o755);
    b.append_data(&mut h, "bin/busybox", &binary[..]).unwrap();
    for applet in String::from_utf8_lossy(&list.stdout).split_whitespace() {
        if applet == "busybox" {
            continue;
        }
        let mut h = tar::Header::new_gnu();
        h.set_entry_type(tar::EntryType::Symlink);
        h.set_size(0);
        h.set_mode(0o777);
        b.append_link(&mut h, format!("bin/{applet}"), "busybox")
            .unwrap();
    }
    let passwd = b"root:x:0:0:root:/root:/bin/sh\n";
    let mut h = tar::Header::new_gnu();
    h.set_size(passwd.len() as u64);
    h.set_mode(0o644);
    b.append_data(&mut h, "etc/passwd", &passwd[..]).unwrap();
    b.into_inner().unwrap()
}

/// `docker import` of the busybox rootfs as `reference` on the engine at `socket`.
pub async fn import_busybox(socket: &str, reference: &str) {
    let docker = Docker::connect_with_unix(socket, 300, bollard::API_DEFAULT_VERSION)
        .unwrap()
        .negotiate_version()
        .await
        .unwrap();
    let (repo, tag) = reference.rsplit_once(':').unwrap_or((reference, "latest"));
    let options = CreateImageOptionsBuilder::new()
        .from_src("-")
        .repo(repo)
        .tag(tag)
        .changes(vec!["CMD [\"/bin/sh\"]".to_string()])
        .build();
    let body = bollard::body_full(busybox_rootfs_tar().into());
    let mut s = docker.create_image(Some(options), Some(body), None);
    while let Some(r) = s.next().await {
        r.expect("docker import of the busybox rootfs");
    }
}

/// The busybox image as `reference`, but declared for another CPU (`arm64`, `amd64`): a
/// `docker save` archive written here (config, manifest, one layer) and loaded with the
/// engine's `/images/load`, since `docker import` ignores a platform on older engines.
pub async fn load_busybox_for_arch(socket: &str, reference: &str, arch: &str) {
    use sha2::{Digest, Sha256};
    let hex = |b: &[u8]| -> String {
        Sha256::digest(b)
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect()
    };
    let layer = busybox_rootfs_tar();
    let diff_id = hex(&layer);
    let config = serde_json::json!({
        "architecture": arch,
        "os": "linux",
        "created": "2026-01-01T00:00:00Z",
        "config": { "Cmd": ["/bin/sh"] },
        "rootfs": { "type": "layers", "diff_ids": [format!("sha256:{diff_id}")] },
        "history": [{ "created": "2026-01-01T00:00:00Z", "created_by": "spark-launch tests" }],
    })
    .to_string();
    let config_id = hex(config.as_bytes());
    let manifest = serde_json::json!([{
        "Config": format!("{config_id}.json"),
        "RepoTags": [reference],
        "Layers": [format!("{diff_id}/layer.tar")],
    }])
    .to_string();
    let mut b = tar::Builder::new(Vec::new());
    let mut add = |name: &str, data: &[u8]| {
        let mut h = tar::Header::new_gnu();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        b.append_data(&mut h, name, data).unwrap();
    };
    add(&format!("{config_id}.json"), config.as_bytes());
    add(&format!("{diff_id}/layer.tar"), &layer);
    add("manifest.json", manifest.as_bytes());
    let archive = b.into_inner().unwrap();
    let docker = Docker::connect_with_unix(socket, 300, bollard::API_DEFAULT_VERSION)
        .unwrap()
        .negotiate_version()
        .await
        .unwrap();
    let mut s = docker.import_image(
        bollard::query_parameters::ImportImageOptionsBuilder::new()
            .quiet(true)
            .build(),
        bollard::body_full(archive.into()),
        None,
    );
    while let Some(r) = s.next().await {
        r.expect("docker load of the foreign-arch image");
    }
}

/// Removes containers and images by exact name when dropped (also when the test failed).
pub struct Cleanup {
    pub socket: String,
    pub containers: Vec<String>,
    pub images: Vec<String>,
}

impl Cleanup {
    pub fn new(socket: &str) -> Self {
        Cleanup {
            socket: socket.to_string(),
            containers: Vec::new(),
            images: Vec::new(),
        }
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let host = format!("unix://{}", self.socket);
        if !self.containers.is_empty() {
            let _ = Command::new("docker")
                .args(["-H", &host, "rm", "-f"])
                .args(&self.containers)
                .output();
        }
        if !self.images.is_empty() {
            let _ = Command::new("docker")
                .args(["-H", &host, "rmi", "-f"])
                .args(&self.images)
                .output();
        }
    }
}

/// Names of all containers (any state) on the engine whose name starts with `prefix`.
pub fn containers_named(socket: &str, prefix: &str) -> Vec<String> {
    let out = Command::new("docker")
        .args([
            "-H",
            &format!("unix://{socket}"),
            "ps",
            "-a",
            "--format",
            "{{.Names}}",
        ])
        .output()
        .expect("docker ps");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|n| n.starts_with(prefix))
        .map(|s| s.to_string())
        .collect()
}

/// `docker inspect` of one container, as JSON.
pub fn inspect(socket: &str, name: &str) -> serde_json::Value {
    let out = Command::new("docker")
        .args(["-H", &format!("unix://{socket}"), "inspect", name])
        .output()
        .expect("docker inspect");
    assert!(
        out.status.success(),
        "docker inspect {name}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    v[0].clone()
}

/// Whether dockerd (pid from its pidfile, or the host's) can raise rlimits: CAP_SYS_RESOURCE
/// in its effective set.
pub fn has_cap_sys_resource(pid: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).expect("read status");
    let eff = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .expect("CapEff");
    let bits = u64::from_str_radix(eff.trim(), 16).expect("hex");
    bits & (1 << 24) != 0
}

/// Gives the test user on node `from` an SSH key and authorises it on every other node, as
/// `spark-launch trust` would: spark-launch run inside `from` then reaches the others over SSH.
pub fn trust_from(net: &super::SimNet, from: usize) {
    let out = net.exec_user(
        from,
        &[
            "sh",
            "-c",
            "mkdir -p ~/.ssh && chmod 700 ~/.ssh && { [ -f ~/.ssh/id_ed25519 ] || ssh-keygen -q -t ed25519 -N '' -f ~/.ssh/id_ed25519; }",
        ],
        &[],
        None,
    );
    assert!(
        out.status.success(),
        "ssh-keygen on n{from}: {}",
        super::describe(&out)
    );
    let public = std::fs::read_to_string(net.home(from).join(".ssh/id_ed25519.pub")).unwrap();
    for i in 1..=net.len() {
        if i == from {
            continue;
        }
        let ssh = net.home(i).join(".ssh");
        std::fs::create_dir_all(&ssh).unwrap();
        std::fs::write(ssh.join("authorized_keys"), &public).unwrap();
        for p in [ssh.clone(), ssh.join("authorized_keys")] {
            std::os::unix::fs::chown(&p, Some(4242), Some(4242)).unwrap();
        }
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&ssh, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
}

/// `--hosts` for spark-launch inside the nodes: `NAME=addr` for every node, head first.
pub fn hosts_arg(net: &super::SimNet) -> String {
    (1..=net.len())
        .map(|i| format!("{}={}", net.hostname(i), net.fabric_addr(i)))
        .collect::<Vec<_>>()
        .join(",")
}
