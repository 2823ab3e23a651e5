//! The NCCL a container would load, read on this machine's real Docker Engine from images built
//! here with real NCCL builds inside (tests/standin/fetch-nccl-wheels: 2.28.9 and 2.30.7 from
//! PyPI): the stand-in serving image with 2.28.9 where NGC images keep theirs (a system folder,
//! found through the image's ld.so.cache), and a stand-in of `nccl-build`'s image with 2.30.7
//! in /opt/nccl/lib (found through its LD_LIBRARY_PATH). Then `--nccl-from` both ways: the
//! volume StageNccl fills from the nccl-build image, and a host folder, each mounted first on
//! the loader path. Nothing is started but the short copy container; every image, container and
//! volume made here carries this run's prefix and is removed at the end.
//!
//! Then PyTorch's own copy: a stand-in of torch's pip wheels (tests/standin/build-torch-image:
//! a gcc-built `libtorch_cuda.so` with torch 2.11.0's RPATH, the wheel's 2.28.9 beside it) in
//! an image whose system folder holds 2.30.7. The read names torch's copy, `--nccl-from` as
//! plans set it (preloaded) comes first, and containers of the image, started for real, map
//! exactly what was read (CPython's import, /proc/self/maps, NCCL's own ncclGetVersion());
//! `status` says the same of a job's running containers.

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use spark_launch::libnccl::loader::Via;
use spark_launch::libnccl::{ImageRead, LibraryOrigin, Loads, MOUNT_DIR};
use spark_launch::node::{NodeName, Role};
use spark_launch::plan::spec::{Mount, MountKind};
use spark_launch::runtime::libnccl::LoaderProbe;
use spark_launch::runtime::{Cluster, NodeTarget};
use support::docker::{Cleanup, HOST_SOCKET, unique};
use support::standin::{nccl_wheels, run_script};

/// Removes the volumes made here (also when the test fails).
struct Volumes(Vec<String>);

impl Drop for Volumes {
    fn drop(&mut self) {
        if !self.0.is_empty() {
            let _ = Command::new("docker")
                .args(["volume", "rm", "-f"])
                .args(&self.0)
                .output();
        }
    }
}

/// Held by each test that points `XDG_CACHE_HOME` (where `apply::nccl` caches what it reads)
/// at its own folder for the whole test: the environment is the process's, so two such tests
/// run one after the other (`cargo test` runs them on threads of one process), each reading
/// and checking its own cache, never another's nor the user's `~/.cache`.
static OWN_CACHE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn here() -> Cluster {
    let mut t = NodeTarget::local(NodeName::new("here").unwrap(), Role::Head);
    t.docker_socket = Some(HOST_SOCKET.to_string());
    Cluster::new(vec![t])
}

fn version(l: &Loads) -> String {
    l.version().map(|v| v.to_string()).unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread")]
async fn what_a_container_loads_is_read_from_real_nccl_builds_in_images_and_nccl_from_comes_first()
{
    let lib = nccl_wheels();
    let old_lib = lib.join("nvidia-nccl-cu12-2.28.9/libnccl.so.2");
    let new_lib = lib.join("nvidia-nccl-cu13-2.30.7/libnccl.so.2");
    let p = unique("-nl");
    let serving = format!("{p}standin-nccl2.28:test");
    let nccl_build = format!("{p}nccl-build-2.30.7:test");
    let mut cleanup = Cleanup::new(HOST_SOCKET);
    cleanup.images.push(serving.clone());
    cleanup.images.push(nccl_build.clone());
    let mut volumes = Volumes(Vec::new());
    let _own_cache = OWN_CACHE.lock().await;
    let cache = tempfile::tempdir().unwrap();
    // SAFETY: no other test of this process sets the environment meanwhile (`OWN_CACHE`),
    // and this test's own tasks have not started yet.
    unsafe { std::env::set_var("XDG_CACHE_HOME", cache.path()) };
    run_script(
        "tests/standin/build-image",
        &["--no-ray", "--nccl", old_lib.to_str().unwrap(), &serving],
    );
    run_script(
        "tests/standin/build-nccl-image",
        &[&nccl_build, new_lib.to_str().unwrap()],
    );
    let cluster = here();
    let node = NodeName::new("here").unwrap();
    let probe = |image: &str| LoaderProbe {
        image: image.to_string(),
        ..LoaderProbe::default()
    };

    // The serving image: a system folder, through its ld.so.cache, behind the soname link.
    let read = spark_launch::apply::nccl::read_on(&cluster, &node, &probe(&serving)).await;
    let ImageRead::Read { resolution, id, .. } = &read else {
        panic!("{read:?}")
    };
    let found = resolution.loads.as_ref().unwrap();
    assert_eq!(
        found.version.as_ref().unwrap().to_string(),
        "2.28.9+cuda12.9"
    );
    assert_eq!(found.via, Via::LdSoCache);
    assert_eq!(found.path, "/usr/lib/x86_64-linux-gnu/libnccl.so.2");
    assert_eq!(
        found.file.as_deref(),
        Some("/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9")
    );
    // Cached by image ID: the second read is the file's.
    let cached: Vec<PathBuf> = std::fs::read_dir(cache.path().join("spark-launch/libnccl"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(cached.len(), 1, "{cached:?}");
    assert!(std::fs::read_to_string(&cached[0]).unwrap().contains(id));
    assert_eq!(
        spark_launch::apply::nccl::read_on(&cluster, &node, &probe(&serving)).await,
        read
    );

    // The nccl-build image: its ENV LD_LIBRARY_PATH comes before its cache.
    let nb = spark_launch::apply::nccl::loads_on(&cluster, &node, &probe(&nccl_build)).await;
    assert_eq!(version(&nb), "2.30.7+cuda13.3", "{nb}");
    let Loads::Known { lib: f, .. } = &nb else {
        panic!("{nb}")
    };
    assert_eq!(f.via, Via::LdLibraryPath);

    // A preload the job sets wins over everything.
    let preloaded = LoaderProbe {
        ld_preload: Some("/opt/nccl/lib/libnccl.so.2".into()),
        ld_library_path: Some("/usr/lib/x86_64-linux-gnu".into()),
        ..probe(&nccl_build)
    };
    let l = spark_launch::apply::nccl::loads_on(&cluster, &node, &preloaded).await;
    let Loads::Known { lib: f, .. } = &l else {
        panic!("{l}")
    };
    assert_eq!(f.via, Via::Preload);

    // --nccl-from IMAGE: StageNccl fills the volume once, then the serving image loads it first.
    let volume = spark_launch::workload::nccl_lib::volume_name(&nccl_build);
    volumes.0.push(volume.clone());
    let cancel = tokio_util::sync::CancellationToken::new();
    let filled =
        spark_launch::apply::nccl::stage_on(&cluster, &node, &nccl_build, &volume, &cancel)
            .await
            .unwrap();
    assert!(filled);
    let again = spark_launch::apply::nccl::stage_on(&cluster, &node, &nccl_build, &volume, &cancel)
        .await
        .unwrap();
    assert!(!again, "the volume of the same image ID is kept");
    let mounted = LoaderProbe {
        ld_library_path: Some(format!("{MOUNT_DIR}:/usr/local/lib")),
        mounts: vec![Mount {
            source: volume.clone(),
            target: MOUNT_DIR.into(),
            read_only: true,
            kind: MountKind::Volume,
        }],
        ..probe(&serving)
    };
    let l = spark_launch::apply::nccl::loads_on(&cluster, &node, &mounted).await;
    assert_eq!(version(&l), "2.30.7+cuda13.3", "{l}");
    assert!(
        matches!(&l, Loads::Known { origin: LibraryOrigin::NcclFrom, lib, .. } if lib.path.starts_with("/opt/spark-launch/nccl/libnccl.so.2")),
        "{l}"
    );

    // --nccl-from PATH: a host folder, bind-mounted.
    let folder = tempfile::tempdir_in(&lib).unwrap();
    std::fs::hard_link(&new_lib, folder.path().join("libnccl.so.2")).unwrap();
    let bound = LoaderProbe {
        mounts: vec![Mount {
            source: folder.path().display().to_string(),
            target: MOUNT_DIR.into(),
            read_only: true,
            kind: MountKind::Bind,
        }],
        ..mounted.clone()
    };
    let l = spark_launch::apply::nccl::loads_on(&cluster, &node, &bound).await;
    assert_eq!(version(&l), "2.30.7+cuda13.3", "{l}");
    // The same folder read on the node itself, as the pre-plan lookup reads --nccl-from PATH.
    let from = spark_launch::apply::nccl::read_from(
        &cluster,
        std::slice::from_ref(&node),
        &spark_launch::workload::nccl_lib::NcclFrom::Path(folder.path().display().to_string()),
        0,
    )
    .await;
    let Some(spark_launch::libnccl::FromRead::Read(f)) = from.get(&node) else {
        panic!("{from:?}")
    };
    assert_eq!(f.version.as_ref().unwrap().to_string(), "2.30.7+cuda13.3");

    // No probe container of this test's is left behind (its names carry this process's id;
    // another test process may be probing at the same time).
    // The engine's removal may still be finishing: allowed a few seconds.
    let ours = format!("sl-nccl-probe-here-{}x", std::process::id());
    let mut left = support::docker::containers_named(HOST_SOCKET, &ours);
    for _ in 0..20 {
        if left.is_empty() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(250));
        left = support::docker::containers_named(HOST_SOCKET, &ours);
    }
    assert!(left.is_empty(), "{left:?}");
}

/// The Python the stand-in images carry (this machine's, copied by build-image): `3.11`.
fn python_version() -> String {
    let out = Command::new("/usr/bin/python3")
        .args(["-c", "import sys; print('%d.%d' % sys.version_info[:2])"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// What the real dynamic loader maps in a container of `image`: `python3` imports the stand-in
/// torch and prints the `libnccl` files of /proc/self/maps and NCCL's own ncclGetVersion().
fn real_loader(image: &str, env: &[(&str, &str)], mount: Option<&Path>) -> (Vec<String>, String) {
    let mut cmd = Command::new("docker");
    cmd.args(["-H", &format!("unix://{HOST_SOCKET}"), "run", "--rm"]);
    for (k, v) in env {
        cmd.args(["-e", &format!("{k}={v}")]);
    }
    if let Some(dir) = mount {
        cmd.args(["-v", &format!("{}:{MOUNT_DIR}:ro", dir.display())]);
    }
    let script = "import torch\nm = sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libnccl' in l})\nprint('\\n'.join(m))\nprint(torch.nccl_version())";
    let out = cmd.args([image, "python3", "-c", script]).output().unwrap();
    assert!(out.status.success(), "{}", support::describe(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let version = lines.pop().unwrap_or_default();
    (lines, version)
}

fn found(l: &Loads) -> &spark_launch::libnccl::loader::Found {
    match l {
        Loads::Known { lib, .. } => lib,
        other => panic!("{other}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn torchs_own_nccl_is_read_through_its_rpath_and_nccl_from_preloads_over_it_as_the_real_loader_does()
 {
    let lib = nccl_wheels();
    let old_lib = lib.join("nvidia-nccl-cu12-2.28.9/libnccl.so.2");
    let new_lib = lib.join("nvidia-nccl-cu13-2.30.7/libnccl.so.2");
    let p = unique("-nt");
    let base = format!("{p}standin-nccl2.30:test");
    let torch = format!("{p}torch-rpath:test");
    let torch_runpath = format!("{p}torch-runpath:test");
    let job = format!("{}nt", p.trim_end_matches('-').replace('_', "-"));
    let mut cleanup = Cleanup::new(HOST_SOCKET);
    cleanup
        .images
        .extend([base.clone(), torch.clone(), torch_runpath.clone()]);
    let _own_cache = OWN_CACHE.lock().await;
    let cache = tempfile::tempdir().unwrap();
    // SAFETY: no other test of this process sets the environment meanwhile (`OWN_CACHE`),
    // and this test's own tasks have not started yet.
    unsafe { std::env::set_var("XDG_CACHE_HOME", cache.path()) };
    // The image's own NCCL (2.30.7) in its system folder, torch's wheel carrying 2.28.9.
    run_script(
        "tests/standin/build-image",
        &["--no-ray", "--nccl", new_lib.to_str().unwrap(), &base],
    );
    run_script(
        "tests/standin/build-torch-image",
        &[&base, &torch, old_lib.to_str().unwrap()],
    );
    run_script(
        "tests/standin/build-torch-image",
        &[
            &base,
            &torch_runpath,
            old_lib.to_str().unwrap(),
            "--runpath",
        ],
    );
    let cluster = here();
    let node = NodeName::new("here").unwrap();
    let sp = format!("/usr/local/lib/python{}/dist-packages", python_version());
    let wheel = format!("{sp}/nvidia/nccl/lib/libnccl.so.2");
    let torch_lib = format!("{sp}/torch/lib/libtorch_cuda.so");
    let mounted = format!("{MOUNT_DIR}/libnccl.so.2");
    let probe = |image: &str| LoaderProbe {
        image: image.to_string(),
        ..LoaderProbe::default()
    };

    // Read without loading: torch's RPATH names its wheel's 2.28.9 before the cache's 2.30.7.
    let read = spark_launch::apply::nccl::read_on(&cluster, &node, &probe(&torch)).await;
    let ImageRead::Read { resolution, .. } = &read else {
        panic!("{read:?}")
    };
    let f = resolution.loads.as_ref().unwrap();
    assert_eq!(
        (f.path.as_str(), f.via, f.by.as_deref()),
        (wheel.as_str(), Via::Rpath, Some(torch_lib.as_str()))
    );
    assert_eq!(f.version.as_ref().unwrap().to_string(), "2.28.9+cuda12.9");
    let other = resolution.otherwise.as_ref().unwrap();
    assert_eq!(other.path, "/usr/lib/x86_64-linux-gnu/libnccl.so.2");
    assert_eq!(
        other.version.as_ref().unwrap().to_string(),
        "2.30.7+cuda13.3"
    );
    let py = resolution.python.as_ref().unwrap();
    let i = py.interpreter.as_ref().unwrap();
    assert_eq!(
        (i.path.as_str(), i.file.as_deref()),
        (
            "/usr/bin/python3",
            Some(format!("/usr/bin/python{}", python_version()).as_str())
        )
    );
    assert_eq!(
        py.torch
            .as_ref()
            .unwrap()
            .dynamic
            .as_ref()
            .unwrap()
            .rpath
            .as_deref(),
        Some(
            "$ORIGIN/../../nvidia/cudnn/lib:$ORIGIN/../../nvidia/nvshmem/lib:$ORIGIN/../../nvidia/nccl/lib:$ORIGIN/../../nvidia/cusparselt/lib:$ORIGIN/../../nvidia/cu13/lib:$ORIGIN"
        )
    );

    // Judged as today: on a ring, torch's 2.28.9 is refused (the cache's 2.30.7 would pass).
    let loads = Loads::from_resolution(resolution.clone(), LibraryOrigin::Image);
    assert_eq!(
        loads.to_string(),
        format!("NCCL 2.28.9+cuda12.9 from {wheel} (RPATH of {torch_lib})")
    );
    let verdict = spark_launch::libnccl::judge(
        &[spark_launch::libnccl::NodeNccl {
            node: node.clone(),
            image: torch.clone(),
            loads,
        }],
        &spark_launch::libnccl::Rule {
            ring: true,
            serving: true,
            ..Default::default()
        },
    );
    assert!(
        verdict.problems[0]
            .problem
            .what
            .starts_with("here would load NCCL 2.28.9+cuda12.9 on this switchless ring"),
        "{verdict:?}"
    );
    assert!(
        verdict.notes[0].contains(
            "the loader's own search finds /usr/lib/x86_64-linux-gnu/libnccl.so.2 (NCCL 2.30.7+cuda13.3, ld.so.cache)"
        ),
        "{verdict:?}"
    );

    // --nccl-from as the plan sets it (preloaded, first on LD_LIBRARY_PATH, mounted), and the
    // old way (LD_LIBRARY_PATH only), which torch's RPATH beats.
    let folder = tempfile::tempdir_in(&lib).unwrap();
    std::fs::hard_link(&new_lib, folder.path().join("libnccl.so.2")).unwrap();
    let bind = vec![Mount {
        source: folder.path().display().to_string(),
        target: MOUNT_DIR.into(),
        read_only: true,
        kind: MountKind::Bind,
    }];
    let path_only = LoaderProbe {
        ld_library_path: Some(MOUNT_DIR.into()),
        mounts: bind.clone(),
        ..probe(&torch)
    };
    let preloaded = LoaderProbe {
        ld_preload: Some(mounted.clone()),
        ..path_only.clone()
    };
    let l = spark_launch::apply::nccl::loads_on(&cluster, &node, &path_only).await;
    assert_eq!(
        (found(&l).path.as_str(), found(&l).via),
        (wheel.as_str(), Via::Rpath)
    );
    let l = spark_launch::apply::nccl::loads_on(&cluster, &node, &preloaded).await;
    assert_eq!(
        (found(&l).path.as_str(), found(&l).via),
        (mounted.as_str(), Via::Preload)
    );
    assert!(
        matches!(
            &l,
            Loads::Known {
                origin: LibraryOrigin::NcclFrom,
                ..
            }
        ),
        "{l}"
    );
    // The RUNPATH variant: LD_LIBRARY_PATH comes first; without it, the RUNPATH's copy.
    let run_plain =
        spark_launch::apply::nccl::loads_on(&cluster, &node, &probe(&torch_runpath)).await;
    assert_eq!(
        (found(&run_plain).path.as_str(), found(&run_plain).via),
        (wheel.as_str(), Via::Runpath)
    );
    let run_path = LoaderProbe {
        image: torch_runpath.clone(),
        ..path_only.clone()
    };
    let l = spark_launch::apply::nccl::loads_on(&cluster, &node, &run_path).await;
    assert_eq!(
        (found(&l).path.as_str(), found(&l).via),
        (mounted.as_str(), Via::LdLibraryPath)
    );

    // The real loader in containers of the images maps what was read, and NCCL says so itself.
    let dir = folder.path();
    for (what, image, env, mount, want, code) in [
        ("rpath, nothing set", &torch, vec![], None, &wheel, "22809"),
        (
            "rpath, LD_LIBRARY_PATH only",
            &torch,
            vec![("LD_LIBRARY_PATH", MOUNT_DIR)],
            Some(dir),
            &wheel,
            "22809",
        ),
        (
            "rpath, --nccl-from",
            &torch,
            vec![
                ("LD_PRELOAD", mounted.as_str()),
                ("LD_LIBRARY_PATH", MOUNT_DIR),
            ],
            Some(dir),
            &mounted,
            "23007",
        ),
        (
            "runpath, nothing set",
            &torch_runpath,
            vec![],
            None,
            &wheel,
            "22809",
        ),
        (
            "runpath, LD_LIBRARY_PATH only",
            &torch_runpath,
            vec![("LD_LIBRARY_PATH", MOUNT_DIR)],
            Some(dir),
            &mounted,
            "23007",
        ),
    ] {
        let (maps, version) = real_loader(image, &env, mount);
        assert_eq!(maps, vec![want.clone()], "{what}");
        assert_eq!(version, code, "{what}");
    }

    // status: what each running container of a job loads, read in the container itself.
    let run = |name: &str, role: &str, extra: &[String]| {
        let out = Command::new("docker")
            .args([
                "-H",
                &format!("unix://{HOST_SOCKET}"),
                "run",
                "-d",
                "--name",
                name,
            ])
            .args(["--label", &format!("dev.spark-launch.job={job}")])
            .args(["--label", "dev.spark-launch.node=here"])
            .args(["--label", &format!("dev.spark-launch.role={role}")])
            .args(extra)
            .args([&torch, "sleep", "300"])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", support::describe(&out));
    };
    let plain = format!("sl-{job}-here");
    let from = format!("sl-{job}-here-from");
    cleanup.containers.extend([plain.clone(), from.clone()]);
    run(&plain, "head", &[]);
    run(
        &from,
        "worker",
        &[
            "-e".into(),
            format!("LD_PRELOAD={mounted}"),
            "-e".into(),
            format!("LD_LIBRARY_PATH={MOUNT_DIR}"),
            "-v".into(),
            format!("{}:{MOUNT_DIR}:ro", dir.display()),
        ],
    );
    let status = |json: bool| {
        let mut args = vec!["status", &job, "--engine"];
        let engine = format!("here=unix://{HOST_SOCKET}");
        args.push(&engine);
        if json {
            args.insert(0, "--json");
        }
        let out = Command::new(env!("CARGO_BIN_EXE_spark-launch"))
            .args(&args)
            .env("SPARK_LAUNCH_NO_PROGRESS", "1")
            .env("XDG_CACHE_HOME", cache.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", support::describe(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let v: serde_json::Value = serde_json::from_str(&status(true)).unwrap();
    let rows = v["jobs"].as_array().unwrap();
    let row = |name: &str| {
        rows.iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("{v}"))
    };
    assert_eq!(row(&plain)["nccl"]["path"], wheel.as_str(), "{v}");
    assert_eq!(row(&plain)["nccl"]["via"], "rpath");
    assert_eq!(row(&plain)["nccl"]["by"], torch_lib.as_str());
    assert_eq!(row(&plain)["nccl"]["version"], "2.28.9+cuda12.9");
    assert_eq!(row(&from)["nccl"]["path"], mounted.as_str(), "{v}");
    assert_eq!(row(&from)["nccl"]["via"], "preload");
    assert_eq!(row(&from)["nccl"]["origin"], "nccl-from");
    assert_eq!(row(&from)["nccl"]["version"], "2.30.7+cuda13.3");
    let text = status(false);
    assert!(
        text.contains(&format!(
            "{plain}  NCCL 2.28.9+cuda12.9 from {wheel} (RPATH of {torch_lib})"
        )),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{from}  NCCL 2.30.7+cuda13.3 from {mounted} (preloaded, --nccl-from)"
        )),
        "{text}"
    );
    let left = support::docker::containers_named(HOST_SOCKET, "sl-nccl-probe-here-");
    assert!(left.is_empty(), "{left:?}");
}
