//! The SSH layer against real sshd on simulated nodes: multiplexed runs with hostile arguments,
//! checked failures that carry the quoted command, copies, a forwarded unix socket with clean
//! teardown, the remote probe, and connection failures named by what the user must fix.
//!
//! The test process enters node 1's network namespace on one thread (so the library itself,
//! not the CLI, is exercised) and talks to the other nodes as the test user with a key it
//! authorised there; its own `~/.ssh` is never read or written (`-F /dev/null`, private
//! known_hosts).

mod support;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use spark_launch::node::NodeName;
use spark_launch::ssh::{
    ConnectFailure, Pool, PoolError, RunOptions, SshError, SshOptions, SshTarget,
};
use support::{SimNet, USER, describe};

/// Runs `f` on a thread inside node `i`'s network namespace, with its own tokio runtime.
fn in_node<R: Send>(net: &SimNet, i: usize, f: impl AsyncFnOnce() -> R + Send) -> R {
    let ns = format!("/run/netns/{}n{i}", net.prefix());
    std::thread::scope(|s| {
        s.spawn(|| {
            let file = std::fs::File::open(&ns).expect("open netns");
            use std::os::fd::AsRawFd;
            let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(
                rc,
                0,
                "setns into {ns}: {}",
                std::io::Error::last_os_error()
            );
            tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap()
                .block_on(f())
        })
        .join()
        .expect("node thread panicked")
    })
}

/// A key pair of the test process, authorised for the test user on the given nodes.
struct Keys {
    dir: tempfile::TempDir,
}

impl Keys {
    fn new(net: &SimNet, nodes: &[usize]) -> Keys {
        let dir = tempfile::tempdir().unwrap();
        let key = dir.path().join("id");
        let st = std::process::Command::new("ssh-keygen")
            .args(["-q", "-t", "ed25519", "-N", "", "-f"])
            .arg(&key)
            .status()
            .expect("ssh-keygen (apt-get install openssh-client)");
        assert!(st.success());
        let public = std::fs::read_to_string(dir.path().join("id.pub")).unwrap();
        for &i in nodes {
            let ssh = net.home(i).join(".ssh");
            std::fs::create_dir_all(&ssh).unwrap();
            std::fs::write(ssh.join("authorized_keys"), &public).unwrap();
            chown_user(&ssh);
            chown_user(&ssh.join("authorized_keys"));
            set_mode(&ssh, 0o700);
        }
        Keys { dir }
    }

    fn options(&self) -> SshOptions {
        SshOptions {
            config_file: Some(PathBuf::from("/dev/null")),
            identity: Some(self.dir.path().join("id")),
            known_hosts: vec![self.dir.path().join("known_hosts")],
            connect_timeout: Duration::from_secs(3),
            ..SshOptions::default()
        }
    }
}

fn chown_user(p: &Path) {
    std::os::unix::fs::chown(p, Some(4242), Some(4242)).unwrap();
}

fn set_mode(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn target(net: &SimNet, i: usize) -> SshTarget {
    SshTarget {
        name: NodeName::new(format!("node{i}")).unwrap(),
        addresses: vec![net.fabric_addr(i).to_string()],
        user: Some(USER.to_string()),
        port: 22,
        local: false,
    }
}

#[test]
fn commands_run_through_one_master_with_every_argument_arriving_unchanged() {
    let net = SimNet::builder(2).services("sshd").up();
    let keys = Keys::new(&net, &[2]);
    let t = target(&net, 2);
    in_node(&net, 1, async || {
        let pool = Pool::connect(std::slice::from_ref(&t), keys.options())
            .await
            .unwrap();
        let node = &pool.handles()[0];
        assert_eq!(node.dest().unwrap().host, net.fabric_addr(2).to_string());
        let tricky = [
            "printf", "%s\\n", "a b", "it's", "$HOME", "`id`", "*", "x;y", "", "\"q\"",
        ];
        let out = node.run(&tricky).await.unwrap();
        let want: String = tricky[2..].iter().map(|a| format!("{a}\n")).collect();
        assert_eq!(out.stdout_text(), want);
        // stdin reaches the remote command.
        let out = node
            .run_with(&["cat"], &RunOptions::stdin("from stdin"))
            .await
            .unwrap();
        assert_eq!(out.stdout_text(), "from stdin");
        // Many commands share the one connection: sshd logs one accepted login only.
        for _ in 0..5 {
            node.run(&["true"]).await.unwrap();
        }
        pool.close().await;
    });
    let log = std::fs::read_to_string(
        support::simnet_root()
            .join(net.prefix())
            .join("n2/log/sshd.log"),
    )
    .unwrap();
    assert_eq!(log.matches("Accepted publickey").count(), 1, "{log}");
}

#[test]
fn a_failing_remote_command_is_an_error_with_the_quoted_command_and_its_stderr() {
    let net = SimNet::builder(2).services("sshd").up();
    let keys = Keys::new(&net, &[2]);
    let t = target(&net, 2);
    in_node(&net, 1, async || {
        let pool = Pool::connect(&[t], keys.options()).await.unwrap();
        let name = NodeName::new("node2").unwrap();
        let err = pool
            .run(&name, &["sh", "-c", "echo oops >&2; exit 3", "my arg"])
            .await
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "node2: `sh -c 'echo oops >&2; exit 3' 'my arg'` exited with 3: oops"
        );
        let out = pool
            .output(&name, &["sh", "-c", "exit 4"], &RunOptions::default())
            .await
            .unwrap();
        assert_eq!(out.code, 4);
        let err = pool
            .get(&name)
            .unwrap()
            .run_with(
                &["sleep", "5"],
                &RunOptions::timeout(Duration::from_millis(300)),
            )
            .await
            .unwrap_err();
        assert!(matches!(err, SshError::Timeout { .. }), "{err}");
        pool.close().await;
    });
}

#[test]
fn a_folder_is_copied_to_a_node_and_a_remote_unix_socket_is_forwarded_then_torn_down() {
    let net = SimNet::builder(2).services("sshd").up();
    let keys = Keys::new(&net, &[2]);
    let t = target(&net, 2);
    let src = tempfile::tempdir().unwrap();
    let folder = src.path().join("weights dir");
    std::fs::create_dir_all(folder.join("sub")).unwrap();
    std::fs::write(folder.join("a.bin"), vec![7u8; 300_000]).unwrap();
    std::fs::write(folder.join("sub/b.txt"), "hello").unwrap();
    // An echo server on node 2, listening on a unix socket owned by the test user.
    let sock = format!("/home/{USER}/echo.sock");
    let server = std::process::Command::new("bash")
        .arg(support::simnet_script())
        .args(["exec", net.prefix(), "2", "--user", USER, "--", "socat"])
        .arg(format!("UNIX-LISTEN:{sock},fork"))
        .arg("EXEC:cat")
        .spawn()
        .expect("socat (apt-get install socat)");
    let sock_host = net.home(2).join("echo.sock");
    for _ in 0..50 {
        if sock_host.exists() {
            break;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(sock_host.exists(), "socat did not start on node 2");

    let local_sock = in_node(&net, 1, async || {
        let pool = Pool::connect(&[t], keys.options()).await.unwrap();
        let node = pool.handles()[0].clone();
        node.copy_to(&folder, &format!("/home/{USER}/copied"))
            .await
            .unwrap();
        let fwd = node.forward_unix_socket(&sock).await.unwrap();
        let path = fwd.local_path().to_path_buf();
        let mut s = UnixStream::connect(&path).unwrap();
        s.write_all(b"ping over ssh").unwrap();
        s.shutdown(std::net::Shutdown::Write).unwrap();
        let mut back = String::new();
        s.read_to_string(&mut back).unwrap();
        assert_eq!(back, "ping over ssh");
        drop(fwd);
        assert!(
            !path.exists(),
            "the local socket is removed with the forward"
        );
        pool.close().await;
        path
    });
    assert!(UnixStream::connect(&local_sock).is_err());
    let copied = net.home(2).join("copied/weights dir");
    assert_eq!(std::fs::read(copied.join("a.bin")).unwrap().len(), 300_000);
    assert_eq!(
        std::fs::read_to_string(copied.join("sub/b.txt")).unwrap(),
        "hello"
    );
    let mut server = server;
    let _ = server.kill();
    let _ = server.wait();
}

#[test]
fn the_remote_probe_reads_a_node_exactly_as_probe_does_there() {
    let net = SimNet::builder(2).services("sshd").up();
    let keys = Keys::new(&net, &[2]);
    let t = target(&net, 2);
    let remote = in_node(&net, 1, async || {
        let pool = Pool::connect(&[t], keys.options()).await.unwrap();
        let mut r = spark_launch::ssh::probe::probe_all(&pool).await;
        pool.close().await;
        r.remove(0).1.unwrap()
    });
    let out = net.spark_launch(2, &["probe", "--json"]);
    assert!(out.status.success(), "{}", describe(&out));
    let there: spark_launch::probe::NodeFacts = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(remote.hostname, net.hostname(2));
    assert_eq!(remote.rdma_devices, there.rdma_devices);
    assert_eq!(remote.interfaces.len(), there.interfaces.len());
    assert!(
        remote
            .rdma_devices
            .iter()
            .any(|d| d.name.as_str() == "roceP2p1s0f1" && d.is_active())
    );
}

#[test]
fn every_unreachable_node_is_reported_with_its_own_reason() {
    let net = SimNet::builder(4).services("sshd").up();
    let keys = Keys::new(&net, &[2]);
    net.stop(3, "sshd");
    let targets = vec![
        target(&net, 2),
        target(&net, 3),
        SshTarget {
            // Node 4 runs sshd, but has not authorised our key.
            ..target(&net, 4)
        },
    ];
    let err = in_node(&net, 1, async || {
        Pool::connect(&targets, keys.options()).await.unwrap_err()
    });
    let PoolError::Nodes(f) = err else {
        panic!("{err}")
    };
    assert_eq!(f.total, 3);
    let kinds: Vec<(String, ConnectFailure)> = f
        .failed
        .iter()
        .map(|(n, e)| (n.to_string(), e.connect_failure().cloned().unwrap()))
        .collect();
    assert_eq!(
        kinds,
        vec![
            ("node3".to_string(), ConnectFailure::Refused),
            ("node4".to_string(), ConnectFailure::AuthFailed)
        ]
    );
    let text = f.to_string();
    assert!(
        text.contains("node3: ssh sparkuser@169.254.100.3: connection refused"),
        "{text}"
    );
}

#[test]
fn a_changed_host_key_is_refused_and_names_the_fix() {
    let net = SimNet::builder(2).services("sshd").up();
    let keys = Keys::new(&net, &[2]);
    let t = target(&net, 2);
    // Record a different key under the node's name, as after a reinstall.
    let other = tempfile::tempdir().unwrap();
    let st = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-f"])
        .arg(other.path().join("k"))
        .status()
        .unwrap();
    assert!(st.success());
    let public = std::fs::read_to_string(other.path().join("k.pub")).unwrap();
    let fields: Vec<&str> = public.split_whitespace().collect();
    std::fs::write(
        keys.dir.path().join("known_hosts"),
        format!("node2 {} {}\n", fields[0], fields[1]),
    )
    .unwrap();
    let err = in_node(&net, 1, async || {
        Pool::connect(&[t], keys.options()).await.unwrap_err()
    });
    let PoolError::Nodes(f) = err else {
        panic!("{err}")
    };
    assert_eq!(
        f.failed[0].1.connect_failure(),
        Some(&ConnectFailure::HostKeyChanged)
    );
    assert!(f.to_string().contains("ssh-keygen -R node2"), "{f}");
}

#[test]
fn under_stock_sshd_limits_connections_made_at_once_and_sessions_past_max_sessions_all_succeed() {
    // Seen once: OpenSSH's own MaxStartups 10:30:100 turns away some of many connections
    // made at once (`kex_exchange_identification`), and MaxSessions 10 refuses the 11th
    // session on one connection. These nodes keep both defaults.
    let net = SimNet::builder(2)
        .services("sshd")
        .stock_sshd()
        .tag("x")
        .up();
    let keys = Keys::new(&net, &[2]);
    let t = target(&net, 2);
    in_node(&net, 1, async || {
        // 30 pools connecting at once: 30 commands started together.
        let pools = futures::future::join_all(
            (0..30).map(|_| Pool::connect(std::slice::from_ref(&t), keys.options())),
        )
        .await;
        let failed: Vec<String> = pools
            .iter()
            .filter_map(|p| p.as_ref().err().map(|e| e.to_string()))
            .collect();
        for p in pools.iter().flatten() {
            p.close().await;
        }
        assert!(
            failed.is_empty(),
            "{} of 30 failed: {failed:#?}",
            failed.len()
        );

        // 24 sessions at once on one node: more than one connection carries them.
        let pool = Pool::connect(std::slice::from_ref(&t), keys.options())
            .await
            .unwrap();
        let node = &pool.handles()[0];
        let runs = futures::future::join_all((0..24).map(|i| {
            let i = i.to_string();
            async move { node.run(&["sh", "-c", "sleep 1; echo \"$0\"", &i]).await }
        }))
        .await;
        for (i, r) in runs.into_iter().enumerate() {
            match r {
                Ok(out) => assert_eq!(out.stdout_text(), format!("{i}\n")),
                Err(e) => panic!("session {i}: {e}"),
            }
        }
        pool.close().await;
    });
}
