//! A node's own NCCL (`--runtime host`) read from its files as the probe reads it, on real NCCL
//! builds (`tests/standin/fetch-nccl-wheels`: 2.28.9 and 2.30.7): a folder laid out as a
//! node's root, with an `ld.so.cache` the real `ldconfig` wrote, a `python3` and a stand-in of
//! PyTorch's wheel (tests/standin/torch-standin: gcc-built, torch 2.11.0's RPATH); and this
//! machine's own root, where CPython's real loader says which NCCL it mapped.

use std::path::{Path, PathBuf};
use std::process::Command;

use spark_launch::libnccl::host::{HostNccl, Program};
use spark_launch::libnccl::loader::{Machine, Via};
use spark_launch::libnccl::python::PythonEnv;
use spark_launch::node::NodeName;
use spark_launch::probe::host_nccl::{self, HostEnv, RootFiles};
use spark_launch::runtime::LocalShell;
use spark_launch::runtime::host_nccl::ShellFiles;

mod support;
use support::standin::nccl_wheels;

fn lib(name: &str) -> PathBuf {
    nccl_wheels().join(name).join("libnccl.so.2")
}

fn ldconfig(root: &Path) {
    let ldconfig = ["/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("ldconfig (libc-bin) is needed");
    let out = Command::new(ldconfig).arg("-r").arg(root).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn env(path: &str, pythonpath: Option<&str>) -> HostEnv {
    HostEnv {
        ld_library_path: None,
        ld_preload: None,
        python: PythonEnv {
            path: Some(path.to_string()),
            pythonpath: pythonpath.map(str::to_string),
            home: Some("/root".to_string()),
        },
    }
}

#[test]
fn a_nodes_loader_copy_and_its_torch_wheels_copy_are_both_read_from_its_own_files() {
    // As on the real GPU machine (the fixtures' README): the loader finds the system copy
    // through ld.so.cache, PyTorch's RPATH its wheel's. Here the system copy is 2.30.7 and the
    // wheel's 2.28.9 (the real builds there are).
    let base = nccl_wheels();
    let dir = tempfile::tempdir_in(&base).unwrap();
    let root = dir.path();
    let libdir = root.join("usr/lib/x86_64-linux-gnu");
    std::fs::create_dir_all(&libdir).unwrap();
    std::fs::create_dir_all(root.join("etc")).unwrap();
    std::fs::hard_link(
        lib("nvidia-nccl-cu13-2.30.7"),
        libdir.join("libnccl.so.2.30.7"),
    )
    .unwrap();
    std::os::unix::fs::symlink("libnccl.so.2.30.7", libdir.join("libnccl.so.2")).unwrap();
    std::fs::write(root.join("etc/ld.so.conf"), "/usr/lib/x86_64-linux-gnu\n").unwrap();
    ldconfig(root);
    std::fs::create_dir_all(root.join("usr/bin")).unwrap();
    std::fs::write(root.join("usr/bin/python3.12"), "").unwrap();
    std::os::unix::fs::symlink("python3.12", root.join("usr/bin/python3")).unwrap();
    let site = root.join("usr/local/lib/python3.12/dist-packages");
    support::standin::run_script(
        "tests/standin/torch-standin",
        &[
            site.to_str().unwrap(),
            lib("nvidia-nccl-cu12-2.28.9").to_str().unwrap(),
        ],
    );

    let h: HostNccl = futures::executor::block_on(host_nccl::read(
        &RootFiles::new(root),
        &env("/usr/local/bin:/usr/bin", None),
        Some(Machine::Amd64),
    ));
    assert_eq!(h.error, None);
    let plain = h.loader.loads.as_ref().expect("the loader finds one");
    assert_eq!(plain.path, "/usr/lib/x86_64-linux-gnu/libnccl.so.2");
    assert_eq!(
        plain.file.as_deref(),
        Some("/usr/lib/x86_64-linux-gnu/libnccl.so.2.30.7")
    );
    assert_eq!(plain.via, Via::LdSoCache);
    assert_eq!(
        plain.version.as_ref().map(|v| v.to_string()).as_deref(),
        Some("2.30.7+cuda13.3")
    );
    let torch = h.torch.as_ref().expect("torch's RPATH leads elsewhere");
    let sp = "/usr/local/lib/python3.12/dist-packages";
    assert_eq!(torch.path, format!("{sp}/nvidia/nccl/lib/libnccl.so.2"));
    assert_eq!(torch.via, Via::Rpath);
    assert_eq!(
        torch.by.as_deref(),
        Some(format!("{sp}/torch/lib/libtorch_cuda.so").as_str())
    );
    assert_eq!(
        h.loads(Program::Plain).to_string(),
        "NCCL 2.30.7+cuda13.3 from /usr/lib/x86_64-linux-gnu/libnccl.so.2 → /usr/lib/x86_64-linux-gnu/libnccl.so.2.30.7 (ld.so.cache)"
    );
    assert_eq!(
        h.loads(Program::Torch).to_string(),
        format!(
            "NCCL 2.28.9+cuda12.9 from {sp}/nvidia/nccl/lib/libnccl.so.2 (RPATH of {sp}/torch/lib/libtorch_cuda.so)"
        )
    );
    let python = h.python.as_ref().and_then(|p| p.interpreter.as_ref());
    assert_eq!(
        python.map(|i| (i.path.as_str(), i.version.as_deref())),
        Some(("/usr/bin/python3", Some("3.12")))
    );

    // The same node with LD_PRELOAD naming its own copy: a preload comes before torch's
    // RPATH, so every program takes it and torch is not looked at.
    let preloaded = futures::executor::block_on(host_nccl::read(
        &RootFiles::new(root),
        &HostEnv {
            ld_preload: Some("/usr/lib/x86_64-linux-gnu/libnccl.so.2.30.7".into()),
            ..env("/usr/bin", None)
        },
        Some(Machine::Amd64),
    ));
    assert_eq!(
        preloaded.loader.loads.as_ref().map(|f| f.via),
        Some(Via::Preload)
    );
    assert_eq!(preloaded.torch, None);
    // An arm64 node takes none of the amd64 builds: the cache's x86-64 entries are not its
    // own, and torch's library is said to be of another CPU.
    let arm = futures::executor::block_on(host_nccl::read(
        &RootFiles::new(root),
        &env("/usr/bin", None),
        Some(Machine::Arm64),
    ));
    assert_eq!(arm.loader.loads, None);
    assert_eq!(arm.torch, None);
    assert_eq!(
        arm.python
            .as_ref()
            .and_then(|p| p.torch.as_ref())
            .and_then(|t| t.error.as_deref()),
        Some("built for amd64, the node is arm64")
    );
}

/// What the real dynamic loader maps: `/usr/bin/python3` imports the stand-in torch in `site`
/// and prints the `libnccl` files in its /proc/self/maps.
fn real_loader(site: &Path) -> Vec<String> {
    let script = "import torch\nprint('\\n'.join(sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libnccl' in l})))";
    let out = Command::new("/usr/bin/python3")
        .args(["-c", script])
        .env_clear()
        .env("PYTHONPATH", site)
        .output()
        .expect("run /usr/bin/python3");
    assert!(
        out.status.success(),
        "python3: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[tokio::test]
async fn this_machines_own_read_names_the_file_its_real_loader_maps_through_the_shell_too() {
    // PyTorch's wheel stand-in on PYTHONPATH of this machine's /usr/bin/python3: the host read
    // of this machine's root, directly and through its shell, names the file CPython's
    // loader maps when it imports that torch.
    let base = nccl_wheels();
    let dir = tempfile::tempdir_in(&base).unwrap();
    let site = dir.path().join("site");
    support::standin::run_script(
        "tests/standin/torch-standin",
        &[
            site.to_str().unwrap(),
            lib("nvidia-nccl-cu12-2.28.9").to_str().unwrap(),
        ],
    );
    let mapped = real_loader(&site);
    let e = env("/usr/bin", Some(site.to_str().unwrap()));
    let here = Machine::from_arch(std::env::consts::ARCH);
    let direct = host_nccl::read(&RootFiles::new("/"), &e, here).await;
    let torch = direct.torch.as_ref().expect("torch's copy");
    assert_eq!(vec![torch.path.clone()], mapped, "{direct:?}");
    assert_eq!(torch.via, Via::Rpath);
    assert_eq!(
        torch.version.as_ref().map(|v| v.to_string()).as_deref(),
        Some("2.28.9+cuda12.9")
    );
    let shell = LocalShell::new(NodeName::new("here").unwrap());
    let through = host_nccl::read(&ShellFiles::new(&shell), &e, here).await;
    assert_eq!(through, direct);
}
