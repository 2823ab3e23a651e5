//! `images/`: what can be checked without building a CUDA image here (no registry): every
//! build argument is documented, the scripts are valid POSIX shell, the Dockerfile copies only
//! files of its context, and the context embedded in the binary is the folder's content.

use std::path::{Path, PathBuf};
use std::process::Command;

use spark_launch::workload::nccl_build::{CONTEXT, dockerfile_args};

fn images() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("images")
}

#[test]
fn every_build_argument_of_the_dockerfile_is_documented_in_the_readme() {
    let dockerfile = std::fs::read_to_string(images().join("nccl-tests/Dockerfile")).unwrap();
    let readme = std::fs::read_to_string(images().join("README.md")).unwrap();
    let args = dockerfile_args(&dockerfile);
    assert!(args.len() >= 10, "{args:?}");
    for a in &args {
        assert!(
            readme.contains(&format!("| `{a}` |")),
            "build argument {a} has no row in images/README.md"
        );
    }
}

#[test]
fn the_base_images_and_sources_are_pinned_never_latest() {
    let dockerfile = std::fs::read_to_string(images().join("nccl-tests/Dockerfile")).unwrap();
    assert!(!dockerfile.contains(":latest"));
    assert!(
        dockerfile.contains("ARG CUDA_DEVEL_IMAGE=nvcr.io/nvidia/cuda:13.0.1-devel-ubuntu24.04")
    );
    // Both stages default to what `nccl-build` builds.
    assert_eq!(
        dockerfile
            .matches(&format!(
                "ARG NCCL_REF={}\n",
                spark_launch::workload::nccl_build::DEFAULT_NCCL_REF
            ))
            .count(),
        2
    );
    assert!(dockerfile.contains("ARG NVCC_GENCODE=\"-gencode=arch=compute_121,code=sm_121\""));
    assert!(dockerfile.contains("MPI=1"));
    // The ssh setup never trusts every host.
    for f in [
        "nccl-tests/Dockerfile",
        "nccl-tests/sl-entrypoint",
        "nccl-tests/sl-wait-ssh",
    ] {
        let text = std::fs::read_to_string(images().join(f)).unwrap();
        assert!(!text.contains("StrictHostKeyChecking no"), "{f}");
        assert!(!text.contains("StrictHostKeyChecking=no"), "{f}");
        assert!(!text.contains("Host *"), "{f}");
        assert!(!text.contains("PasswordAuthentication yes"), "{f}");
    }
}

#[test]
fn the_entrypoint_scripts_are_valid_posix_shell() {
    for f in ["sl-entrypoint", "sl-wait-ssh"] {
        let out = Command::new("sh")
            .arg("-n")
            .arg(images().join("nccl-tests").join(f))
            .output()
            .expect("sh runs");
        assert!(
            out.status.success(),
            "{f}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_dockerfile_copies_only_files_of_its_context_and_the_binary_embeds_them_all() {
    let dir = images().join("nccl-tests");
    let dockerfile = std::fs::read_to_string(dir.join("Dockerfile")).unwrap();
    for line in dockerfile
        .lines()
        .filter(|l| l.starts_with("COPY ") && !l.contains("--from"))
    {
        let parts: Vec<&str> = line.split_whitespace().collect();
        for src in &parts[1..parts.len() - 1] {
            assert!(
                dir.join(src).is_file(),
                "COPY {src}: not in images/nccl-tests"
            );
            assert!(
                CONTEXT.iter().any(|(p, ..)| p == src),
                "{src} is not embedded in CONTEXT"
            );
        }
    }
    for (path, content, _) in CONTEXT {
        let on_disk = std::fs::read_to_string(dir.join(path)).unwrap();
        assert_eq!(&on_disk, content, "{path}");
    }
}
