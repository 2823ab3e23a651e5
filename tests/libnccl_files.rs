//! The libnccl reader on real NCCL builds: NVIDIA's `nvidia-nccl-cu12` 2.28.9 and
//! `nvidia-nccl-cu13` 2.30.7 wheels from PyPI (`tests/standin/fetch-nccl-wheels` fetches them,
//! sha256-pinned, and unpacks `libnccl.so.2`; read as bytes, never loaded), and an
//! `ld.so.cache` written by the real `ldconfig`.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use spark_launch::libnccl::loader::{self, CacheEntry, LoaderEnv, Machine, Via};
use spark_launch::libnccl::version::{RING_MIN, Scanner};

mod support;
use support::standin::nccl_wheels;

fn lib(name: &str) -> PathBuf {
    nccl_wheels().join(name).join("libnccl.so.2")
}

/// Streams the file through the scanner in 64 KiB reads, stopping once the version is found:
/// the version and how many bytes it took.
fn read_version(path: &Path) -> (String, u64) {
    let mut f = std::fs::File::open(path).unwrap();
    let mut s = Scanner::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut buf).unwrap();
        if n == 0 {
            break;
        }
        if s.feed(&buf[..n]).is_some() {
            break;
        }
    }
    let v = s.finish().map(|v| v.to_string()).unwrap_or_default();
    (v, s.fed)
}

fn head(path: &Path) -> Vec<u8> {
    let mut h = vec![0u8; 64];
    std::fs::File::open(path)
        .unwrap()
        .read_exact(&mut h)
        .unwrap();
    h
}

#[test]
fn the_version_string_of_real_nccl_builds_is_read_from_the_first_megabytes() {
    for (name, want) in [
        ("nvidia-nccl-cu12-2.28.9", "2.28.9+cuda12.9"),
        ("nvidia-nccl-cu13-2.30.7", "2.30.7+cuda13.3"),
    ] {
        let path = lib(name);
        let size = std::fs::metadata(&path).unwrap().len();
        let (version, read) = read_version(&path);
        assert_eq!(version, want, "{name}");
        assert!(
            read < 8 << 20 && read < size / 20,
            "{name}: read {read} of {size} bytes before the version string"
        );
        assert_eq!(loader::elf_machine(&head(&path)), Ok(Machine::Amd64));
    }
}

#[test]
fn only_the_release_at_ring_min_knows_subnet_aware_routing() {
    // The reason for RING_MIN, checked on the real builds: NCCL's parameter
    // IB_SUBNET_AWARE_ROUTING is in 2.30.7 and not in 2.28.9. NCCL's parameter names sit in
    // .rodata with the version string, within the first 32 MiB of both files (the rest is
    // device code and debug info).
    for (name, has) in [
        ("nvidia-nccl-cu12-2.28.9", false),
        ("nvidia-nccl-cu13-2.30.7", true),
    ] {
        let mut bytes = Vec::new();
        std::fs::File::open(lib(name))
            .unwrap()
            .take(32 << 20)
            .read_to_end(&mut bytes)
            .unwrap();
        let found = bytes
            .windows(b"IB_SUBNET_AWARE_ROUTING".len())
            .any(|w| w == b"IB_SUBNET_AWARE_ROUTING");
        assert_eq!(found, has, "{name}");
        let v = spark_launch::libnccl::version::scan(&bytes).unwrap();
        assert_eq!(v.version >= RING_MIN, has, "{name}");
    }
}

#[test]
fn a_cache_written_by_the_real_ldconfig_names_the_library_for_the_loader() {
    // A root holding the 2.28.9 library in a folder of ld.so.conf; `ldconfig -r` reads its
    // ELF soname and writes the cache as in an image.
    let base = nccl_wheels();
    let root = tempfile::tempdir_in(&base).unwrap();
    let libdir = root.path().join("opt/nccl/lib");
    std::fs::create_dir_all(&libdir).unwrap();
    std::fs::create_dir_all(root.path().join("etc")).unwrap();
    std::fs::hard_link(lib("nvidia-nccl-cu12-2.28.9"), libdir.join("libnccl.so.2")).unwrap();
    std::fs::write(root.path().join("etc/ld.so.conf"), "/opt/nccl/lib\n").unwrap();
    let ldconfig = ["/sbin/ldconfig", "/usr/sbin/ldconfig"]
        .into_iter()
        .find(|p| Path::new(p).exists())
        .expect("ldconfig (libc-bin) is needed");
    let out = Command::new(ldconfig)
        .arg("-r")
        .arg(root.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cache = std::fs::read(root.path().join("etc/ld.so.cache")).unwrap();
    let entries = loader::parse_ld_cache(&cache).unwrap();
    let nccl: Vec<&CacheEntry> = entries
        .iter()
        .filter(|e| e.soname == "libnccl.so.2")
        .collect();
    assert_eq!(nccl.len(), 1, "{entries:?}");
    assert_eq!(nccl[0].path, "/opt/nccl/lib/libnccl.so.2");
    let c = loader::candidates(&LoaderEnv::default(), &entries, Some(Machine::Amd64));
    assert_eq!(c[0].path, "/opt/nccl/lib/libnccl.so.2");
    assert_eq!(c[0].via, Via::LdSoCache);
    // The same cache on an arm64 container names nothing: the entry is an x86-64 library.
    let arm = loader::candidates(&LoaderEnv::default(), &entries, Some(Machine::Arm64));
    assert!(arm.iter().all(|c| c.via != Via::LdSoCache), "{arm:?}");
}
