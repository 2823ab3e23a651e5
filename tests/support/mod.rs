//! Simulated nodes for integration tests: a thin Rust wrapper around `tests/harness/simnet`.
//!
//! `SimNet::builder(3).services("sshd,avahi").up()` creates three nodes (network, mount and UTS
//! namespaces with real sshd and avahi-daemon, fake RDMA sysfs showing twins) and tears them
//! down when dropped, also when the test fails. `net.spark_launch(1, &["discover"])` runs the
//! binary under test inside node 1 as the test user, the way a user would on the head.
//!
//! Every name carries a prefix unique to this test (`s3-<pid>-<n>-`), so tests can run in
//! parallel with each other and with other engineers' runs. A missing prerequisite (not root,
//! avahi-daemon or sshd not installed) makes `up` panic with simnet's message: the test fails,
//! it never skips.
#![allow(dead_code)]

/// Images, names and engine helpers for the runtime tests.
pub mod docker;
/// Bundled snapshot fixtures, copied and edited.
pub mod fixtures;
/// SGLang's own argument parser over the pinned wheel.
pub mod sglang;
/// The stand-in scripts: real NCCL wheels, image builders.
pub mod standin;

use std::io::Write;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The test user inside every node (see `SIMNET_USER` in the script).
pub const USER: &str = "sparkuser";
/// Its password on every node.
pub const PASSWORD: &str = "spark-launch-test";

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// Path of the harness script.
pub fn simnet_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/harness/simnet")
}

/// The folder under which simnet keeps its per-prefix state.
pub fn simnet_root() -> PathBuf {
    std::env::var_os("SIMNET_ROOT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/var/tmp/simnet"))
}

/// How the simulated nodes' fabric ports are cabled (`simnet up --cabling`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cabling {
    /// Every node's outer port on one bridge (a switch); the default.
    Bridge,
    /// Two nodes, outer port to outer port, twin to twin; the inner ports unplugged.
    Direct,
    /// Node k's outer port to node k+1's inner port, the last back to the first.
    Ring,
}

/// Options for [`SimNet`], given to `simnet up`.
pub struct Builder {
    nodes: usize,
    services: String,
    mgmt_only: Vec<usize>,
    tag: String,
    cabling: Cabling,
    fabric_addr: bool,
    admin: bool,
    cold: bool,
    stock_sshd: bool,
}

impl Builder {
    /// Return as soon as every avahi-daemon has established its service, without waiting
    /// out the announcements (a cluster that just booted; see `SIMNET_AVAHI_SETTLE`).
    pub fn cold(mut self) -> Self {
        self.cold = true;
        self
    }

    /// Comma-separated services: `sshd`, `avahi`, `dbus`, `dockerd`.
    pub fn services(mut self, services: &str) -> Self {
        self.services = services.to_string();
        self
    }

    /// Nodes (1-based) that get only a management interface, no fabric link.
    pub fn mgmt_only(mut self, nodes: &[usize]) -> Self {
        self.mgmt_only = nodes.to_vec();
        self
    }

    /// A short letter tag in the prefix (helps reading `ip netns list` while debugging).
    pub fn tag(mut self, tag: &str) -> Self {
        self.tag = tag.to_string();
        self
    }

    /// veth "cables" from node to node instead of the bridge.
    pub fn cabling(mut self, cabling: Cabling) -> Self {
        self.cabling = cabling;
        self
    }

    /// No IPv4 address on any fabric netdev (fresh Sparks: carrier only).
    pub fn no_fabric_addr(mut self) -> Self {
        self.fabric_addr = false;
        self
    }

    /// The test user may sudo (with its password), `/etc/netplan` is per node and `netplan`
    /// is simnet's stand-in (see `simnet up --admin`).
    pub fn admin(mut self) -> Self {
        self.admin = true;
        self
    }

    /// sshd with OpenSSH's own MaxStartups (10:30:100) and MaxSessions (10), as on a real
    /// node, instead of the raised limits every other test runs with (`--sshd-limits stock`).
    pub fn stock_sshd(mut self) -> Self {
        self.stock_sshd = true;
        self
    }

    /// Brings the nodes up; panics with simnet's message when that fails.
    pub fn up(self) -> SimNet {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let prefix = format!("s3{}-{:x}-{n}-", self.tag, std::process::id());
        assert!(
            prefix.len() <= 12,
            "prefix {prefix} too long; use a shorter tag"
        );
        let mut args = vec![
            "up".to_string(),
            prefix.clone(),
            self.nodes.to_string(),
            "--services".to_string(),
            self.services.clone(),
        ];
        match self.cabling {
            Cabling::Bridge => {}
            Cabling::Direct => args.extend(["--cabling".to_string(), "direct".to_string()]),
            Cabling::Ring => args.extend(["--cabling".to_string(), "ring".to_string()]),
        }
        if !self.fabric_addr {
            args.push("--no-fabric-addr".into());
        }
        if self.admin {
            args.push("--admin".into());
        }
        if self.stock_sshd {
            args.extend(["--sshd-limits".to_string(), "stock".to_string()]);
        }
        if !self.mgmt_only.is_empty() {
            args.push("--mgmt-only".into());
            args.push(
                self.mgmt_only
                    .iter()
                    .map(|i| i.to_string())
                    .collect::<Vec<_>>()
                    .join(","),
            );
        }
        let mut cmd = Command::new("bash");
        cmd.arg(simnet_script()).args(&args);
        if self.cold {
            cmd.env("SIMNET_AVAHI_SETTLE", "0");
        }
        let out = cmd
            .output()
            .unwrap_or_else(|e| panic!("cannot run bash {}: {e}", simnet_script().display()));
        // From here on the guard exists, so a failed `up` is still cleaned up.
        let net = SimNet {
            prefix,
            nodes: self.nodes,
            mgmt_only: self.mgmt_only,
            fabric_addr: self.fabric_addr,
            bin: None,
        };
        assert!(
            out.status.success(),
            "simnet up failed (a prerequisite is missing or the host refused):\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        net.with_binary()
    }
}

/// A set of simulated nodes; dropped means torn down.
pub struct SimNet {
    prefix: String,
    nodes: usize,
    mgmt_only: Vec<usize>,
    fabric_addr: bool,
    bin: Option<PathBuf>,
}

impl SimNet {
    pub fn builder(nodes: usize) -> Builder {
        Builder {
            nodes,
            services: "sshd,avahi".into(),
            mgmt_only: Vec::new(),
            tag: String::new(),
            cabling: Cabling::Bridge,
            fabric_addr: true,
            admin: false,
            cold: false,
            stock_sshd: false,
        }
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    pub fn len(&self) -> usize {
        self.nodes
    }

    /// The hostname of node `i` (1-based), which is also its mDNS name.
    pub fn hostname(&self, i: usize) -> String {
        format!("{}n{i}", self.prefix)
    }

    /// The address of node `i`'s fabric interface (`enp1s0f1np1`).
    pub fn fabric_addr(&self, i: usize) -> Ipv4Addr {
        assert!(!self.mgmt_only.contains(&i), "node {i} has no fabric link");
        assert!(
            self.fabric_addr,
            "the nodes were made without fabric addresses"
        );
        Ipv4Addr::new(169, 254, 100, i as u8)
    }

    /// The address of node `i`'s management interface (`enP7s7`).
    pub fn mgmt_addr(&self, i: usize) -> Ipv4Addr {
        Ipv4Addr::new(10, 231, 0, i as u8)
    }

    /// The host path of the test user's home directory on node `i`.
    pub fn home(&self, i: usize) -> PathBuf {
        simnet_root()
            .join(&self.prefix)
            .join(format!("n{i}"))
            .join("home")
            .join(USER)
    }

    /// The socket of node `i`'s own Docker Engine (`--services` with `dockerd`), as the test
    /// process outside the node reaches it. Inside the node the same engine is
    /// `/var/run/docker.sock`.
    pub fn docker_socket(&self, i: usize) -> PathBuf {
        simnet_root()
            .join(&self.prefix)
            .join(format!("n{i}"))
            .join("docker.sock")
    }

    /// The spark-launch binary as seen from inside the nodes (a link in simnet's folder, so a
    /// checkout under a private directory still works for the test user).
    pub fn binary(&self) -> &Path {
        self.bin
            .as_deref()
            .unwrap_or(Path::new(env!("CARGO_BIN_EXE_spark-launch")))
    }

    fn with_binary(mut self) -> Self {
        let src = PathBuf::from(env!("CARGO_BIN_EXE_spark-launch"));
        let dir = simnet_root().join(&self.prefix).join("bin");
        let dst = dir.join("spark-launch");
        let ok = std::fs::create_dir_all(&dir).is_ok()
            && (std::fs::hard_link(&src, &dst).is_ok() || std::fs::copy(&src, &dst).is_ok());
        assert!(ok, "cannot place the binary into {}", dir.display());
        self.bin = Some(dst);
        self
    }

    /// Runs a command inside node `i` as root.
    pub fn exec_root(&self, i: usize, argv: &[&str]) -> Output {
        self.exec(i, None, argv, &[], None)
    }

    /// Runs a command inside node `i` as the test user, with extra environment and stdin.
    pub fn exec_user(
        &self,
        i: usize,
        argv: &[&str],
        env: &[(&str, &str)],
        stdin: Option<&[u8]>,
    ) -> Output {
        self.exec(i, Some(USER), argv, env, stdin)
    }

    fn exec(
        &self,
        i: usize,
        user: Option<&str>,
        argv: &[&str],
        env: &[(&str, &str)],
        stdin: Option<&[u8]>,
    ) -> Output {
        let mut cmd = Command::new("bash");
        cmd.arg(simnet_script())
            .arg("exec")
            .arg(&self.prefix)
            .arg(i.to_string());
        if let Some(u) = user {
            cmd.arg("--user").arg(u);
        }
        for (k, v) in env {
            cmd.arg("-e").arg(format!("{k}={v}"));
        }
        cmd.arg("--").args(argv);
        cmd.stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn simnet exec");
        if let Some(input) = stdin
            && let Some(mut s) = child.stdin.take()
        {
            let _ = s.write_all(input);
        }
        child.wait_with_output().expect("wait for simnet exec")
    }

    /// Runs `spark-launch ARGS` inside node `i` as the test user (progress lines plain).
    pub fn spark_launch(&self, i: usize, args: &[&str]) -> Output {
        self.spark_launch_with(i, args, &[], None)
    }

    /// Same, with extra environment and stdin.
    pub fn spark_launch_with(
        &self,
        i: usize,
        args: &[&str],
        env: &[(&str, &str)],
        stdin: Option<&[u8]>,
    ) -> Output {
        let bin = self.binary().display().to_string();
        let mut argv = vec![bin.as_str()];
        argv.extend_from_slice(args);
        let mut all_env = vec![("RUST_BACKTRACE", "1")];
        all_env.extend_from_slice(env);
        self.exec_user(i, &argv, &all_env, stdin)
    }

    /// Stops one service (`sshd`, `avahi`) on node `i`.
    pub fn stop(&self, i: usize, service: &str) {
        let out = Command::new("bash")
            .arg(simnet_script())
            .args(["stop", &self.prefix, &i.to_string(), service])
            .output()
            .expect("run simnet stop");
        assert!(
            out.status.success(),
            "simnet stop {service} on n{i} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Starts one service (`sshd`) on node `i` again after [`SimNet::stop`].
    pub fn start(&self, i: usize, service: &str) {
        let out = Command::new("bash")
            .arg(simnet_script())
            .args(["start", &self.prefix, &i.to_string(), service])
            .output()
            .expect("run simnet start");
        assert!(
            out.status.success(),
            "simnet start {service} on n{i} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// Brings everything down now (also done on drop).
    pub fn down(&mut self) {
        if self.prefix.is_empty() {
            return;
        }
        let _ = Command::new("bash")
            .arg(simnet_script())
            .args(["down", &self.prefix])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
        self.prefix.clear();
    }
}

impl Drop for SimNet {
    fn drop(&mut self) {
        self.down();
    }
}

/// stdout as text.
pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// stderr as text.
pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Both streams and the exit status, for assertion messages.
pub fn describe(o: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        o.status.code(),
        stdout(o),
        stderr(o)
    )
}
