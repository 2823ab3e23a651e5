//! The libnccl reader on real NCCL builds: NVIDIA's `nvidia-nccl-cu12` 2.28.9 and
//! `nvidia-nccl-cu13` 2.30.7 wheels from PyPI (`tests/standin/fetch-nccl-wheels` fetches them,
//! sha256-pinned, and unpacks `libnccl.so.2`; the reader reads them as bytes), an
//! `ld.so.cache` written by the real `ldconfig`, and the loader's order for PyTorch's RPATH
//! checked against the real dynamic loader: this machine's CPython imports a stand-in torch
//! (tests/standin/torch-standin: gcc-built, torch 2.11.0's RPATH) and says which NCCL it
//! mapped, and NCCL itself says its version.

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Command;

use spark_launch::libnccl::elf::{Dynamic, DynamicReader, Feed};
use spark_launch::libnccl::loader::{self, CacheEntry, LoaderEnv, Machine, Via};
use spark_launch::libnccl::python::Requester;
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

/// Streams a file through the dynamic-section reader in 64 KiB reads (again from the start when
/// asked): the result, the bytes read and the passes.
fn read_dynamic(path: &Path) -> (Dynamic, u64, u8) {
    let mut r = DynamicReader::new();
    let mut buf = vec![0u8; 64 * 1024];
    let mut total = 0u64;
    'pass: loop {
        let mut f = std::fs::File::open(path).unwrap();
        loop {
            let n = f.read(&mut buf).unwrap();
            total += n as u64;
            let fed = if n == 0 {
                r.finish().map(Feed::Done)
            } else {
                r.feed(&buf[..n])
            };
            match fed.unwrap_or_else(|e| panic!("{}: {e}", path.display())) {
                Feed::More => {}
                Feed::Again => {
                    r.again();
                    continue 'pass;
                }
                Feed::Done(d) => return (d, total, r.pass()),
            }
        }
    }
}

#[test]
fn the_dynamic_section_of_real_nccl_builds_names_their_soname_and_needs() {
    // What `readelf -d` prints for both wheels' libnccl.so.2: no RPATH, these NEEDED.
    for name in ["nvidia-nccl-cu12-2.28.9", "nvidia-nccl-cu13-2.30.7"] {
        let path = lib(name);
        let (d, read, passes) = read_dynamic(&path);
        assert_eq!(d.soname.as_deref(), Some("libnccl.so.2"), "{name}");
        assert_eq!(
            d.needed,
            [
                "libpthread.so.0",
                "librt.so.1",
                "libdl.so.2",
                "libstdc++.so.6",
                "libm.so.6",
                "libgcc_s.so.1",
                "libc.so.6",
                "ld-linux-x86-64.so.2"
            ],
            "{name}"
        );
        assert_eq!((d.rpath, d.runpath), (None, None), "{name}");
        // The dynamic segment is at the end of the code: nearly the whole file goes by, once.
        let size = std::fs::metadata(&path).unwrap().len();
        assert_eq!(passes, 1, "{name}");
        assert!(read > size / 2 && read <= size, "{name}: {read} of {size}");
    }
}

/// torch 2.11.0's RPATH, as its wheel's `torch/lib/*.so` carry it (DT_RPATH; read from the
/// cp312 manylinux_2_28 x86_64 wheel on PyPI).
const TORCH_RPATH: &str = "$ORIGIN/../../nvidia/cudnn/lib:$ORIGIN/../../nvidia/nvshmem/lib:$ORIGIN/../../nvidia/nccl/lib:$ORIGIN/../../nvidia/cusparselt/lib:$ORIGIN/../../nvidia/cu13/lib:$ORIGIN";

/// What the real dynamic loader maps: `/usr/bin/python3` imports the stand-in torch in `site`
/// with `env`, and prints the `libnccl` files in its /proc/self/maps and NCCL's own
/// ncclGetVersion().
fn real_loader(site: &Path, env: &[(&str, String)]) -> (Vec<String>, String) {
    let script = "import torch\nm = sorted({l.split()[-1] for l in open('/proc/self/maps') if 'libnccl' in l})\nprint('\\n'.join(m))\nprint(torch.nccl_version())";
    let out = Command::new("/usr/bin/python3")
        .args(["-c", script])
        .env_clear()
        .env("PYTHONPATH", site)
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("run /usr/bin/python3");
    assert!(
        out.status.success(),
        "python3: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let mut lines: Vec<String> = text.lines().map(str::to_string).collect();
    let version = lines.pop().unwrap_or_default();
    (lines, version)
}

/// What our model says the loader takes for the stand-in torch in `site`: its dynamic section
/// read as bytes, the candidates in glibc's order (this machine's ld.so.cache included), the
/// first that exists and is built for this machine.
fn model(site: &Path, env: &LoaderEnv) -> (String, Via) {
    let object = site.join("torch/lib/libtorch_cuda.so");
    let (d, _, _) = read_dynamic(&object);
    assert!(d.needed.iter().any(|n| n == "libnccl.so.2"), "{d:?}");
    let requester = Requester {
        object: object.display().to_string(),
        rpath: d.rpath,
        runpath: d.runpath,
    };
    let cache = std::fs::read("/etc/ld.so.cache")
        .ok()
        .and_then(|b| loader::parse_ld_cache(&b).ok())
        .unwrap_or_default();
    let here = Machine::from_arch(std::env::consts::ARCH);
    loader::candidates_for(env, &cache, here, Some(&requester))
        .into_iter()
        .find(|c| {
            let mut h = vec![0u8; 64];
            std::fs::File::open(&c.path)
                .and_then(|mut f| f.read_exact(&mut h))
                .is_ok()
                && loader::accepts(&h, here).is_ok()
        })
        .map(|c| (c.path, c.via))
        .expect("the model finds a libnccl.so.2")
}

#[test]
fn torchs_rpath_beats_ld_library_path_a_runpath_does_not_and_a_preload_beats_both_on_the_real_loader()
 {
    // Stand-ins of PyTorch's wheel (gcc-built libtorch_cuda.so with torch's RPATH, then with
    // it as a RUNPATH) carrying 2.28.9, and 2.30.7 in a folder of its own, as --nccl-from
    // mounts it. The real loader (CPython's ctypes, as `import torch`) and the model must name
    // the same file in every case.
    let base = nccl_wheels();
    let dir = tempfile::tempdir_in(&base).unwrap();
    let old = lib("nvidia-nccl-cu12-2.28.9");
    let new = lib("nvidia-nccl-cu13-2.30.7");
    let standin = |name: &str, extra: &[&str]| -> PathBuf {
        let site = dir.path().join(name);
        let mut args = vec![site.to_str().unwrap(), old.to_str().unwrap()];
        args.extend_from_slice(extra);
        support::standin::run_script("tests/standin/torch-standin", &args);
        site
    };
    let rpath_site = standin("rpath", &[]);
    let runpath_site = standin("runpath", &["--runpath"]);
    let mounted = dir.path().join("nccl-from");
    std::fs::create_dir_all(&mounted).unwrap();
    std::fs::hard_link(&new, mounted.join("libnccl.so.2")).unwrap();
    let (d, _, _) = read_dynamic(&rpath_site.join("torch/lib/libtorch_cuda.so"));
    assert_eq!(d.rpath.as_deref(), Some(TORCH_RPATH));
    assert_eq!(d.runpath, None);

    let from_lib = mounted.join("libnccl.so.2").display().to_string();
    let mounted_dir = mounted.display().to_string();
    let wheel = |site: &Path| {
        site.join("nvidia/nccl/lib/libnccl.so.2")
            .display()
            .to_string()
    };
    let cases: Vec<(&str, &Path, LoaderEnv, String, Via, &str)> = vec![
        (
            "RPATH, nothing set",
            &rpath_site,
            LoaderEnv::default(),
            wheel(&rpath_site),
            Via::Rpath,
            "22809",
        ),
        (
            "RPATH, LD_LIBRARY_PATH names 2.30.7",
            &rpath_site,
            LoaderEnv {
                ld_library_path: Some(mounted_dir.clone()),
                ..LoaderEnv::default()
            },
            wheel(&rpath_site),
            Via::Rpath,
            "22809",
        ),
        (
            "RUNPATH, LD_LIBRARY_PATH names 2.30.7",
            &runpath_site,
            LoaderEnv {
                ld_library_path: Some(mounted_dir.clone()),
                ..LoaderEnv::default()
            },
            from_lib.clone(),
            Via::LdLibraryPath,
            "23007",
        ),
        (
            "RPATH, 2.30.7 preloaded and first on LD_LIBRARY_PATH (--nccl-from)",
            &rpath_site,
            LoaderEnv {
                ld_preload: Some(from_lib.clone()),
                ld_library_path: Some(mounted_dir.clone()),
                ..LoaderEnv::default()
            },
            from_lib.clone(),
            Via::Preload,
            "23007",
        ),
    ];
    for (what, site, env, want, via, version) in cases {
        let mut vars: Vec<(&str, String)> = Vec::new();
        if let Some(v) = &env.ld_library_path {
            vars.push(("LD_LIBRARY_PATH", v.clone()));
        }
        if let Some(v) = &env.ld_preload {
            vars.push(("LD_PRELOAD", v.clone()));
        }
        let (mapped, code) = real_loader(site, &vars);
        assert_eq!(mapped, vec![want.clone()], "{what}: the real loader");
        assert_eq!(code, version, "{what}: ncclGetVersion()");
        assert_eq!(model(site, &env), (want, via), "{what}: the model");
    }
}
