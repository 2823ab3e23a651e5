//! The NCCL a container would load, read on this machine's real Docker Engine from images built
//! here with real NCCL builds inside (tests/standin/fetch-nccl-wheels: 2.28.9 and 2.30.7 from
//! PyPI): the stand-in serving image with 2.28.9 where NGC images keep theirs (a system folder,
//! found through the image's ld.so.cache), and a stand-in of `nccl-build`'s image with 2.30.7
//! in /opt/nccl/lib (found through its LD_LIBRARY_PATH). Then `--nccl-from` both ways: the
//! volume StageNccl fills from the nccl-build image, and a host folder, each mounted first on
//! the loader path. Nothing is started but the short copy container; every image, container and
//! volume made here carries this run's prefix and is removed at the end.

mod support;

use std::path::PathBuf;
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
    let cache = tempfile::tempdir().unwrap();
    // SAFETY: set before any other thread of this test process reads the environment.
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

    // No probe container is left behind.
    let left = support::docker::containers_named(HOST_SOCKET, "sl-nccl-probe-here-");
    assert!(left.is_empty(), "{left:?}");
}
