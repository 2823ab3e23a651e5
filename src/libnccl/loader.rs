//! Which `libnccl.so.2` a container's dynamic loader resolves, decided the way glibc's `ld.so`
//! decides it for a `dlopen("libnccl.so.2")` or a `DT_NEEDED` without an RPATH: a preloaded
//! NCCL (`LD_PRELOAD`, `/etc/ld.so.preload`) first, then every `LD_LIBRARY_PATH` folder, then
//! `/etc/ld.so.cache` (the binary cache `ldconfig` writes from `ld.so.conf`), then the system
//! folders (Debian/Ubuntu's: `/lib/<triplet>`, `/usr/lib/<triplet>`, `/lib`, `/usr/lib`). A
//! file of another ELF class or machine is skipped, as the loader skips it.
//!
//! A library that asks for NCCL with an RPATH of its own (PyTorch's `libtorch_cuda.so` from
//! the pip wheels: `$ORIGIN/../../nvidia/nccl/lib`) changes the order as glibc's
//! `_dl_map_object` does: an NCCL already loaded (a preload) is taken whatever the path; then
//! the requester's `DT_RPATH` (only when it has no `DT_RUNPATH`), then `LD_LIBRARY_PATH`, then
//! its `DT_RUNPATH`, then the cache and the system folders ([`candidates_for`]; `$ORIGIN` is
//! the requester's folder). Not modelled: the RPATHs of the libraries that loaded the
//! requester (torch's carry the same list) and the `glibc-hwcaps` subfolders. Pure: the caller
//! reads the files (the image's cache, the first bytes of each candidate) and hands them in.

use std::fmt;

use serde::{Deserialize, Serialize};

use super::python::{PythonSeen, Requester};
use super::version::LibVersion;

/// The name every NCCL 2 library is loaded by.
pub const SONAME: &str = "libnccl.so.2";

/// A CPU an ELF file is built for (the two spark-launch runs on, by Docker's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Machine {
    Amd64,
    Arm64,
    /// Another `e_machine`.
    Other(u16),
}

impl Machine {
    /// From Docker's (`amd64`, `arm64`) or `uname -m`'s names.
    pub fn from_arch(arch: &str) -> Option<Machine> {
        match arch.trim() {
            "amd64" | "x86_64" => Some(Machine::Amd64),
            "arm64" | "aarch64" => Some(Machine::Arm64),
            _ => None,
        }
    }

    /// Debian's multiarch triplet, for the system folders.
    fn triplet(self) -> Option<&'static str> {
        match self {
            Machine::Amd64 => Some("x86_64-linux-gnu"),
            Machine::Arm64 => Some("aarch64-linux-gnu"),
            Machine::Other(_) => None,
        }
    }

    /// The `ld.so.cache` flags of a 64-bit glibc library for this machine.
    fn cache_flags(self) -> Option<i32> {
        match self {
            Machine::Amd64 => Some(FLAG_ELF_LIBC6 | 0x0300),
            Machine::Arm64 => Some(FLAG_ELF_LIBC6 | 0x0a00),
            Machine::Other(_) => None,
        }
    }
}

impl fmt::Display for Machine {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Machine::Amd64 => f.write_str("amd64"),
            Machine::Arm64 => f.write_str("arm64"),
            Machine::Other(m) => write!(f, "ELF machine {m}"),
        }
    }
}

impl Serialize for Machine {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for Machine {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if let Some(m) = Machine::from_arch(&s) {
            return Ok(m);
        }
        s.strip_prefix("ELF machine ")
            .and_then(|n| n.parse().ok())
            .map(Machine::Other)
            .ok_or_else(|| serde::de::Error::custom(format!("unknown machine {s:?}")))
    }
}

/// Why the first bytes of a file are not a library the loader would take.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ElfError {
    #[error("not an ELF file")]
    NotElf,
    #[error("a 32-bit or big-endian ELF file")]
    NotElf64Le,
}

/// The machine of an ELF file from its first 20 bytes (64-bit little-endian only: what the
/// loader of an arm64 or amd64 container takes).
pub fn elf_machine(head: &[u8]) -> Result<Machine, ElfError> {
    if head.len() < 20 || &head[..4] != b"\x7fELF" {
        return Err(ElfError::NotElf);
    }
    if head[4] != 2 || head[5] != 1 {
        return Err(ElfError::NotElf64Le);
    }
    Ok(match u16::from_le_bytes([head[18], head[19]]) {
        62 => Machine::Amd64,
        183 => Machine::Arm64,
        m => Machine::Other(m),
    })
}

/// Whether the loader of a `want` container takes a file whose first bytes are `head`, or why
/// it skips it.
pub fn accepts(head: &[u8], want: Option<Machine>) -> Result<Machine, String> {
    accepts_in(head, want, "the container")
}

/// [`accepts`] for the loader of `place` (`the container`, `the node`), named in the reason.
pub fn accepts_in(head: &[u8], want: Option<Machine>, place: &str) -> Result<Machine, String> {
    let m = elf_machine(head).map_err(|e| e.to_string())?;
    match want {
        Some(w) if w != m => Err(format!("built for {m}, {place} is {w}")),
        _ => Ok(m),
    }
}

const FLAG_ELF_LIBC6: i32 = 0x0003;
const OLD_MAGIC: &[u8] = b"ld.so-1.7.0";
const NEW_MAGIC: &[u8] = b"glibc-ld.so.cache1.1";

/// One library `/etc/ld.so.cache` maps.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CacheEntry {
    /// The name it is found by (`libnccl.so.2`).
    pub soname: String,
    /// Its path.
    pub path: String,
    pub flags: i32,
    pub hwcap: u64,
}

/// `/etc/ld.so.cache` could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum LdCacheError {
    #[error("not an ld.so.cache (unknown magic)")]
    Magic,
    #[error("ld.so.cache is cut short")]
    Truncated,
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, LdCacheError> {
    b.get(at..at + 4)
        .map(|x| u32::from_le_bytes([x[0], x[1], x[2], x[3]]))
        .ok_or(LdCacheError::Truncated)
}

fn cstr_at(b: &[u8], at: usize) -> Result<String, LdCacheError> {
    let rest = b.get(at..).ok_or(LdCacheError::Truncated)?;
    let end = rest
        .iter()
        .position(|c| *c == 0)
        .ok_or(LdCacheError::Truncated)?;
    Ok(String::from_utf8_lossy(&rest[..end]).into_owned())
}

/// Reads glibc's binary cache: the new format (`glibc-ld.so.cache1.1`, what `ldconfig` writes
/// since glibc 2.32), also behind the old one (`ld.so-1.7.0`, the compat layout of older
/// releases). Little-endian hosts only (arm64, amd64).
pub fn parse_ld_cache(b: &[u8]) -> Result<Vec<CacheEntry>, LdCacheError> {
    let base = if b.starts_with(NEW_MAGIC) {
        0
    } else if b.starts_with(OLD_MAGIC) {
        let nlibs = u32_at(b, 12)? as usize;
        let end = 16 + nlibs * 12;
        let aligned = end.div_ceil(8) * 8;
        if !b.get(aligned..).is_some_and(|r| r.starts_with(NEW_MAGIC)) {
            // An old-format-only cache (glibc before 2.3): nothing modern writes it.
            return Err(LdCacheError::Magic);
        }
        aligned
    } else {
        return Err(LdCacheError::Magic);
    };
    let header = b.get(base..).ok_or(LdCacheError::Truncated)?;
    let nlibs = u32_at(header, 20)? as usize;
    let mut out = Vec::with_capacity(nlibs.min(65536));
    for i in 0..nlibs {
        let at = 48 + i * 24;
        let e = header.get(at..at + 24).ok_or(LdCacheError::Truncated)?;
        let flags = i32::from_le_bytes([e[0], e[1], e[2], e[3]]);
        let key = u32::from_le_bytes([e[4], e[5], e[6], e[7]]) as usize;
        let value = u32::from_le_bytes([e[8], e[9], e[10], e[11]]) as usize;
        let mut hw = [0u8; 8];
        hw.copy_from_slice(&e[16..24]);
        out.push(CacheEntry {
            soname: cstr_at(header, key)?,
            path: cstr_at(header, value)?,
            flags,
            hwcap: u64::from_le_bytes(hw),
        });
    }
    Ok(out)
}

/// How the loader reaches a library.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Via {
    /// `LD_PRELOAD` or `/etc/ld.so.preload`: loaded before anything else asks for NCCL.
    Preload,
    /// The `DT_RPATH` of the library that asks for NCCL: before `LD_LIBRARY_PATH`.
    Rpath,
    LdLibraryPath,
    /// The `DT_RUNPATH` of the library that asks for NCCL: after `LD_LIBRARY_PATH`.
    Runpath,
    LdSoCache,
    SystemDir,
}

impl fmt::Display for Via {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Via::Preload => "preloaded",
            Via::Rpath => "RPATH",
            Via::LdLibraryPath => "LD_LIBRARY_PATH",
            Via::Runpath => "RUNPATH",
            Via::LdSoCache => "ld.so.cache",
            Via::SystemDir => "a system folder",
        })
    }
}

/// A path the loader would try, in order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub path: String,
    pub via: Via,
}

/// The loader's inputs in the container: its environment and `/etc/ld.so.preload`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoaderEnv {
    pub ld_preload: Option<String>,
    /// The content of `/etc/ld.so.preload`.
    pub ld_so_preload: Option<String>,
    pub ld_library_path: Option<String>,
}

fn is_nccl_name(name: &str) -> bool {
    name.rsplit('/')
        .next()
        .is_some_and(|b| b.starts_with("libnccl.so"))
}

/// Every path the loader tries for a `dlopen("libnccl.so.2")` from a library without an RPATH,
/// in its order, without duplicates.
pub fn candidates(
    env: &LoaderEnv,
    cache: &[CacheEntry],
    machine: Option<Machine>,
) -> Vec<Candidate> {
    candidates_for(env, cache, machine, None)
}

/// The folders of an RPATH or RUNPATH list, `$ORIGIN` (or `${ORIGIN}`) replaced by the folder
/// of `object` and `..` folded; entries the loader would take relative to the working folder,
/// or with other tokens (`$LIB`, `$PLATFORM`), are left out.
pub fn expand_origin(list: &str, object: &str) -> Vec<String> {
    let origin = object.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
    list.split(':')
        .map(|d| d.replace("${ORIGIN}", origin).replace("$ORIGIN", origin))
        .filter(|d| d.starts_with('/') && !d.contains('$'))
        .map(|d| lexical(&d))
        .collect()
}

/// The lexical form of a path as an absolute one: `.` and empty parts dropped, each `..`
/// folding the part before it (none above the root), no link followed. Tells a link from its
/// target, and where a relative link or `$ORIGIN` leads.
pub fn lexical(path: &str) -> String {
    let mut parts: Vec<&str> = Vec::new();
    for p in path.split('/') {
        match p {
            "" | "." => {}
            ".." => {
                parts.pop();
            }
            p => parts.push(p),
        }
    }
    format!("/{}", parts.join("/"))
}

/// Every path the loader tries for `libnccl.so.2` when `requester` asks for it (its
/// `DT_NEEDED`), in glibc's order: preloads, the requester's RPATH (when it has no RUNPATH),
/// `LD_LIBRARY_PATH`, its RUNPATH, the cache, the system folders.
pub fn candidates_for(
    env: &LoaderEnv,
    cache: &[CacheEntry],
    machine: Option<Machine>,
    requester: Option<&Requester>,
) -> Vec<Candidate> {
    let (rpath, runpath) = match requester {
        Some(r) => match (&r.runpath, &r.rpath) {
            (Some(run), _) => (Vec::new(), expand_origin(run, &r.object)),
            (None, Some(rp)) => (expand_origin(rp, &r.object), Vec::new()),
            (None, None) => (Vec::new(), Vec::new()),
        },
        None => (Vec::new(), Vec::new()),
    };
    let mut out: Vec<Candidate> = Vec::new();
    let mut push = |path: String, via: Via| {
        if !out.iter().any(|c| c.path == path) {
            out.push(Candidate { path, via });
        }
    };
    let search_dirs = |list: &str| -> Vec<String> {
        list.split([':', ';'])
            .filter(|d| d.starts_with('/') && !d.contains('$'))
            .map(|d| d.trim_end_matches('/').to_string())
            .map(|d| if d.is_empty() { "/".to_string() } else { d })
            .collect()
    };
    let lib_dirs = env
        .ld_library_path
        .as_deref()
        .map(search_dirs)
        .unwrap_or_default();
    let join = |dir: &str, name: &str| {
        if dir == "/" {
            format!("/{name}")
        } else {
            format!("{dir}/{name}")
        }
    };
    let cache_paths = |name: &str| -> Vec<String> {
        cache
            .iter()
            .filter(|e| e.soname == name && e.hwcap == 0)
            .filter(|e| match machine.and_then(Machine::cache_flags) {
                Some(f) => e.flags == f || e.flags == FLAG_ELF_LIBC6,
                None => e.flags & 0xff == FLAG_ELF_LIBC6,
            })
            .map(|e| e.path.clone())
            .collect()
    };
    let system: Vec<String> = machine
        .and_then(Machine::triplet)
        .map(|t| vec![format!("/lib/{t}"), format!("/usr/lib/{t}")])
        .unwrap_or_default()
        .into_iter()
        .chain(["/lib".to_string(), "/usr/lib".to_string()])
        .collect();
    // Preloads: a path is taken as is; a bare name is searched like any library.
    for list in [env.ld_preload.as_deref(), env.ld_so_preload.as_deref()]
        .into_iter()
        .flatten()
    {
        for item in list.split([' ', ':', '\t', '\n']).filter(|s| !s.is_empty()) {
            if !is_nccl_name(item) {
                continue;
            }
            if item.contains('/') {
                push(item.to_string(), Via::Preload);
            } else {
                for d in &lib_dirs {
                    push(join(d, item), Via::Preload);
                }
                for p in cache_paths(item) {
                    push(p, Via::Preload);
                }
                for d in &system {
                    push(join(d, item), Via::Preload);
                }
            }
        }
    }
    for d in &rpath {
        push(join(d, SONAME), Via::Rpath);
    }
    for d in &lib_dirs {
        push(join(d, SONAME), Via::LdLibraryPath);
    }
    for d in &runpath {
        push(join(d, SONAME), Via::Runpath);
    }
    for p in cache_paths(SONAME) {
        push(p, Via::LdSoCache);
    }
    for d in &system {
        push(join(d, SONAME), Via::SystemDir);
    }
    out
}

/// The library the loader takes, and what it read in it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Found {
    /// Its path in the container, as the loader asks for it.
    pub path: String,
    /// The file that path leads to, when it is a symbolic link.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    pub via: Via,
    /// The library whose RPATH or RUNPATH led here (`via` says which).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub by: Option<String>,
    pub machine: Machine,
    /// NCCL's build string in it; `None` when the file carries none (not an NCCL build).
    pub version: Option<LibVersion>,
}

impl Found {
    /// Why the loader takes it: `ld.so.cache`, `RPATH of /…/torch/lib/libtorch_cuda.so`.
    pub fn why(&self) -> String {
        match (&self.by, self.via) {
            (Some(by), Via::Rpath | Via::Runpath) => format!("{} of {by}", self.via),
            _ => self.via.to_string(),
        }
    }
}

/// A candidate the loader would skip.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Skipped {
    pub path: String,
    pub why: String,
}

/// What the loader of one container resolves for `libnccl.so.2`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resolution {
    /// `None`: no candidate exists (or every one was skipped).
    pub loads: Option<Found>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub skipped: Vec<Skipped>,
    /// What was seen of the engine's Python and torch (`None`: not looked at, as when a
    /// preload comes first).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub python: Option<Box<PythonSeen>>,
    /// What the loader's own search (without the requester's RPATH or RUNPATH) takes, when
    /// that differs from `loads`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub otherwise: Option<Box<Found>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(preload: Option<&str>, path: Option<&str>) -> LoaderEnv {
        LoaderEnv {
            ld_preload: preload.map(str::to_string),
            ld_so_preload: None,
            ld_library_path: path.map(str::to_string),
        }
    }

    fn entry(path: &str, flags: i32) -> CacheEntry {
        CacheEntry {
            soname: SONAME.into(),
            path: path.into(),
            flags,
            hwcap: 0,
        }
    }

    #[test]
    fn the_loader_order_is_preload_then_ld_library_path_then_cache_then_system_folders() {
        let cache = vec![
            entry("/usr/lib/x86_64-linux-gnu/libnccl.so.2", 0x0303),
            entry("/usr/lib/aarch64-linux-gnu/libnccl.so.2", 0x0a03),
        ];
        let c = candidates(
            &env(
                Some("/opt/x/libnccl.so.2.30.7 /usr/lib/libfoo.so"),
                Some("/opt/spark-launch/nccl::relative:/usr/local/cuda/lib64/"),
            ),
            &cache,
            Some(Machine::Amd64),
        );
        let got: Vec<(&str, Via)> = c.iter().map(|c| (c.path.as_str(), c.via)).collect();
        assert_eq!(
            got,
            vec![
                ("/opt/x/libnccl.so.2.30.7", Via::Preload),
                ("/opt/spark-launch/nccl/libnccl.so.2", Via::LdLibraryPath),
                ("/usr/local/cuda/lib64/libnccl.so.2", Via::LdLibraryPath),
                ("/usr/lib/x86_64-linux-gnu/libnccl.so.2", Via::LdSoCache),
                ("/lib/x86_64-linux-gnu/libnccl.so.2", Via::SystemDir),
                ("/lib/libnccl.so.2", Via::SystemDir),
                ("/usr/lib/libnccl.so.2", Via::SystemDir),
            ]
        );
    }

    /// torch 2.11.0's RPATH (its wheel's `torch/lib/*.so`, read from PyPI), in a Debian
    /// site folder.
    fn torch(rpath: bool) -> Requester {
        let list = "$ORIGIN/../../nvidia/cudnn/lib:$ORIGIN/../../nvidia/nvshmem/lib:$ORIGIN/../../nvidia/nccl/lib:$ORIGIN/../../nvidia/cusparselt/lib:$ORIGIN/../../nvidia/cu13/lib:$ORIGIN";
        Requester {
            object: "/usr/local/lib/python3.12/dist-packages/torch/lib/libtorch_cuda.so".into(),
            rpath: rpath.then(|| list.to_string()),
            runpath: (!rpath).then(|| list.to_string()),
        }
    }

    #[test]
    fn torchs_rpath_comes_before_ld_library_path_and_a_runpath_after_it() {
        let cache = vec![entry("/lib/x86_64-linux-gnu/libnccl.so.2", 0x0303)];
        let e = env(None, Some("/usr/local/cuda/lib64"));
        let order = |r: &Requester| -> Vec<(String, Via)> {
            candidates_for(&e, &cache, Some(Machine::Amd64), Some(r))
                .into_iter()
                .map(|c| (c.path, c.via))
                .take(4)
                .collect()
        };
        let sp = "/usr/local/lib/python3.12/dist-packages";
        let rpath = order(&torch(true));
        assert_eq!(
            rpath,
            vec![
                (format!("{sp}/nvidia/cudnn/lib/libnccl.so.2"), Via::Rpath),
                (format!("{sp}/nvidia/nvshmem/lib/libnccl.so.2"), Via::Rpath),
                (format!("{sp}/nvidia/nccl/lib/libnccl.so.2"), Via::Rpath),
                (
                    format!("{sp}/nvidia/cusparselt/lib/libnccl.so.2"),
                    Via::Rpath
                ),
            ]
        );
        let all = candidates_for(&e, &cache, Some(Machine::Amd64), Some(&torch(true)));
        let at = |p: &str| all.iter().position(|c| c.path == p).unwrap();
        assert!(
            at(&format!("{sp}/torch/lib/libnccl.so.2")) < at("/usr/local/cuda/lib64/libnccl.so.2")
        );
        assert!(
            at("/usr/local/cuda/lib64/libnccl.so.2") < at("/lib/x86_64-linux-gnu/libnccl.so.2")
        );
        let runpath = order(&torch(false));
        assert_eq!(
            runpath[..2],
            [
                (
                    "/usr/local/cuda/lib64/libnccl.so.2".to_string(),
                    Via::LdLibraryPath
                ),
                (format!("{sp}/nvidia/cudnn/lib/libnccl.so.2"), Via::Runpath),
            ]
        );
        // A preload comes first whatever asks.
        let pre = candidates_for(
            &env(Some("/opt/spark-launch/nccl/libnccl.so.2"), None),
            &cache,
            Some(Machine::Amd64),
            Some(&torch(true)),
        );
        assert_eq!(pre[0].via, Via::Preload);
        assert_eq!(pre[1].via, Via::Rpath);
    }

    #[test]
    fn a_lexical_path_folds_dots_and_never_climbs_above_the_root() {
        assert_eq!(
            lexical("/usr/lib/./x/../libnccl.so.2"),
            "/usr/lib/libnccl.so.2"
        );
        assert_eq!(lexical("/../../etc//nccl.conf"), "/etc/nccl.conf");
        assert_eq!(lexical("opt/nccl/"), "/opt/nccl");
        assert_eq!(lexical("/"), "/");
    }

    #[test]
    fn origin_is_the_requesters_folder_and_other_tokens_are_left_out() {
        assert_eq!(
            expand_origin(
                "${ORIGIN}/../lib:$ORIGIN:relative:$LIB/x:/abs/./y/",
                "/sp/torch/lib/libtorch_cuda.so"
            ),
            vec!["/sp/torch/lib", "/sp/torch/lib", "/abs/y"]
        );
        let f = Found {
            path: "/sp/nvidia/nccl/lib/libnccl.so.2".into(),
            file: None,
            via: Via::Rpath,
            by: Some("/sp/torch/lib/libtorch_cuda.so".into()),
            machine: Machine::Amd64,
            version: None,
        };
        assert_eq!(f.why(), "RPATH of /sp/torch/lib/libtorch_cuda.so");
    }

    #[test]
    fn elf_headers_name_the_machine_and_other_files_are_refused() {
        let mut h = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0];
        h.extend([0u8; 10]);
        let mut arm = h.clone();
        arm.extend(183u16.to_le_bytes());
        let mut x86 = h.clone();
        x86.extend(62u16.to_le_bytes());
        assert_eq!(elf_machine(&arm), Ok(Machine::Arm64));
        assert_eq!(elf_machine(&x86), Ok(Machine::Amd64));
        assert_eq!(
            elf_machine(b"#!/bin/sh\n echo hello there"),
            Err(ElfError::NotElf)
        );
        assert_eq!(
            accepts(&arm, Some(Machine::Amd64)).unwrap_err(),
            "built for arm64, the container is amd64"
        );
        assert_eq!(accepts(&x86, Some(Machine::Amd64)), Ok(Machine::Amd64));
    }

    #[test]
    fn a_cache_in_the_new_format_and_behind_the_old_one_reads_the_same() {
        // Two entries, strings after the entries; offsets from the new header.
        let mut new = Vec::new();
        new.extend_from_slice(NEW_MAGIC);
        new.extend(2u32.to_le_bytes()); // nlibs
        new.extend(0u32.to_le_bytes()); // len_strings (unused here)
        new.extend([2u8, 0, 0, 0]); // flags, padding
        new.extend(0u32.to_le_bytes()); // extension offset
        new.extend([0u8; 12]);
        let strings = 48 + 2 * 24;
        let names = [
            "libnccl.so.2\0",
            "/usr/lib/x86_64-linux-gnu/libnccl.so.2\0",
            "libc.so.6\0",
            "/lib/x86_64-linux-gnu/libc.so.6\0",
        ];
        let mut offs = Vec::new();
        let mut at = strings;
        for n in names {
            offs.push(at as u32);
            at += n.len();
        }
        for (k, v) in [(offs[0], offs[1]), (offs[2], offs[3])] {
            new.extend(0x0303i32.to_le_bytes());
            new.extend(k.to_le_bytes());
            new.extend(v.to_le_bytes());
            new.extend(0u32.to_le_bytes());
            new.extend(0u64.to_le_bytes());
        }
        for n in names {
            new.extend_from_slice(n.as_bytes());
        }
        let e = parse_ld_cache(&new).unwrap();
        assert_eq!(e.len(), 2);
        assert_eq!(e[0].path, "/usr/lib/x86_64-linux-gnu/libnccl.so.2");
        assert_eq!(e[1].soname, "libc.so.6");

        let mut compat = Vec::new();
        compat.extend_from_slice(OLD_MAGIC);
        compat.push(0);
        compat.extend(1u32.to_le_bytes());
        compat.extend([0u8; 12]); // one old entry
        while compat.len() % 8 != 0 {
            compat.push(0);
        }
        compat.extend(&new);
        assert_eq!(parse_ld_cache(&compat).unwrap(), e);
        assert_eq!(parse_ld_cache(b"garbage"), Err(LdCacheError::Magic));
        assert_eq!(parse_ld_cache(&new[..60]), Err(LdCacheError::Truncated));
    }
}
