//! The walk that finds which `libnccl.so.2` a machine's processes load, over that machine's
//! files, whoever holds them: a container's (read through the engine's archive API by
//! `runtime::libnccl`), a node's own through its shell (`runtime::host_nccl`), or a root
//! folder on this machine (`probe::host_nccl`). One walk for all, so a node's own NCCL
//! (`--runtime host`) is read exactly as an image's: `/etc/ld.so.cache` and
//! `/etc/ld.so.preload`, a preload first, then the first `python3` on `PATH` and its torch
//! (`libnccl::python`), whose `libtorch_cuda.so`'s RPATH orders the loader's candidates
//! (`libnccl::loader::candidates_for`); each candidate read until its ELF header and NCCL's
//! build string (`libnccl::version`). Nothing is loaded or run.
//!
//! A source that can read at an offset (a disk, a shell) reads a library's dynamic section in
//! a few small reads ([`libnccl::elf::DynamicReader::wanted`]); one that only streams (an
//! engine's archive) streams to it. What the files say is decided by `libnccl`; this only
//! reads.

use std::pin::Pin;

use futures::future::BoxFuture;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::libnccl::elf::{Dynamic, DynamicReader, Feed};
use crate::libnccl::loader::{self, Candidate, Found, LoaderEnv, Machine, Skipped, Via};
use crate::libnccl::python::{self, Interpreter, PythonEnv, PythonSeen, Torch};
use crate::libnccl::version::Scanner;

/// Reading a machine's files failed (the source could not be asked, not "absent").
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct FileError(pub String);

/// The loader variables a process starts with (the job's over the image's, or a node
/// shell's).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoaderVars {
    pub ld_preload: Option<String>,
    pub ld_library_path: Option<String>,
}

/// What one walk over a machine's files found.
#[derive(Debug, Default)]
pub struct Walked {
    /// What a process whose PyTorch asks for NCCL loads: a preload, else torch's RPATH or
    /// RUNPATH in the loader's order, else the loader's own search.
    pub loads: Option<Found>,
    /// Candidates skipped on the way to `loads`.
    pub skipped: Vec<Skipped>,
    /// What the loader's own search takes (no requester's RPATH): `loads` unless torch's
    /// RPATH or RUNPATH led elsewhere.
    pub plain: Option<Found>,
    /// Candidates skipped by the loader's own search, when it was made on its own.
    pub plain_skipped: Vec<Skipped>,
    /// What was seen of `python3` and torch (`None` when a preload comes first).
    pub python: Option<Box<PythonSeen>>,
}

/// Resolves `libnccl.so.2` on `files` as the loader would, for a program whose PyTorch asks
/// for it and for one without an RPATH of its own: `/etc/ld.so.cache` and
/// `/etc/ld.so.preload` read, a preload first, then the first `python3` on `PATH` and its
/// torch (`libnccl::python`), whose RPATH orders the candidates
/// (`libnccl::loader::candidates_for`).
pub async fn walk(
    files: &dyn Files,
    vars: &LoaderVars,
    python_env: &PythonEnv,
    machine: Option<Machine>,
) -> Result<Walked, FileError> {
    let cache = match files.read_small("/etc/ld.so.cache").await? {
        Some(bytes) => loader::parse_ld_cache(&bytes).unwrap_or_default(),
        None => Vec::new(),
    };
    let ld_so_preload = files
        .read_small("/etc/ld.so.preload")
        .await?
        .map(|b| String::from_utf8_lossy(&b).into_owned());
    let env = LoaderEnv {
        ld_preload: vars.ld_preload.clone(),
        ld_so_preload,
        ld_library_path: vars.ld_library_path.clone(),
    };
    let mut w = Walked::default();
    // A preloaded NCCL is taken whatever asks for it: torch's RPATH does not matter then.
    let (preloads, plain): (Vec<Candidate>, Vec<Candidate>) =
        loader::candidates(&env, &cache, machine)
            .into_iter()
            .partition(|c| c.via == Via::Preload);
    w.loads = first_lib(files, &preloads, machine, &mut w.skipped).await?;
    if w.loads.is_some() {
        w.plain = w.loads.clone();
        return Ok(w);
    }
    let seen = find_torch(files, python_env, machine).await?;
    let requester = seen.torch.as_ref().and_then(Torch::requester);
    w.python = Some(Box::new(seen));
    let Some(requester) = requester else {
        w.loads = first_lib(files, &plain, machine, &mut w.skipped).await?;
        w.plain = w.loads.clone();
        return Ok(w);
    };
    let ordered: Vec<Candidate> = loader::candidates_for(&env, &cache, machine, Some(&requester))
        .into_iter()
        .filter(|c| c.via != Via::Preload)
        .collect();
    w.loads = first_lib(files, &ordered, machine, &mut w.skipped).await?;
    match &mut w.loads {
        Some(f) if matches!(f.via, Via::Rpath | Via::Runpath) => {
            f.by = Some(requester.object.clone());
            // What the loader's own search would take: the answer that leaves torch out.
            w.plain = first_lib(files, &plain, machine, &mut w.plain_skipped).await?;
        }
        other => w.plain = other.clone(),
    }
    Ok(w)
}

/// The first of `candidates` the loader takes (read), noting the ones it skips.
async fn first_lib(
    files: &dyn Files,
    candidates: &[Candidate],
    machine: Option<Machine>,
    skipped: &mut Vec<Skipped>,
) -> Result<Option<Found>, FileError> {
    let paths: Vec<String> = candidates.iter().map(|c| c.path.clone()).collect();
    let may = files.may_exist(&paths).await?;
    for (Candidate { path, via }, may) in candidates.iter().zip(may) {
        if !may {
            continue;
        }
        match read_lib(files, path, machine).await? {
            LibRead::Absent => {}
            LibRead::Skip(why) => skipped.push(Skipped {
                path: path.clone(),
                why,
            }),
            LibRead::Lib {
                path: real,
                machine,
                version,
            } => {
                return Ok(Some(Found {
                    file: (real != *path).then_some(real),
                    path: path.clone(),
                    via: *via,
                    by: None,
                    machine,
                    version,
                }));
            }
        }
    }
    Ok(None)
}

/// One path as a stat says (nothing is read): whether it is a folder, and where it leads when
/// a link (the whole chain followed).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PathStat {
    pub dir: bool,
    pub link: Option<String>,
}

/// A file opened for reading, links followed.
pub enum Opened {
    Absent,
    /// Not a regular file, or a chain of links too long.
    NotFile(String),
    File {
        /// Where the links led.
        path: String,
        body: Pin<Box<dyn AsyncRead + Send>>,
    },
}

/// Read access to one machine's files, as the walk needs it: a container's (the engine's
/// archive API, `runtime::libnccl`), a node's own through its shell (`runtime::host_nccl`), or
/// a root folder on this machine (`probe::host_nccl::RootFiles`). Paths are absolute in that machine's root; links are followed inside it.
pub trait Files: Send + Sync {
    /// Whose loader this is, in reasons: `the container`, `the node`.
    fn place(&self) -> &'static str;

    /// Where, for error messages: `in sl-nccl-probe-…`, `on spark-1`.
    fn label(&self) -> String;

    /// What `path` is; `None` when it does not exist.
    fn stat<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Option<PathStat>, FileError>>;

    /// A small file (links followed); `None` when absent or not a file.
    fn read_small<'a>(&'a self, path: &'a str)
    -> BoxFuture<'a, Result<Option<Vec<u8>>, FileError>>;

    /// A file to stream from its start.
    fn open<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Opened, FileError>>;

    /// Which of `paths` may exist, in one look where the source can (a node's shell); a
    /// source that cannot tell cheaply says every one may.
    fn may_exist<'a>(&'a self, paths: &'a [String]) -> BoxFuture<'a, Result<Vec<bool>, FileError>> {
        Box::pin(async move { Ok(vec![true; paths.len()]) })
    }

    /// Whether [`Files::read_at`] works (a file on a disk), or the source only streams (an
    /// engine's archive).
    fn random_access(&self) -> bool {
        false
    }

    /// At most `len` bytes at `offset` of a file (links followed); fewer at its end.
    fn read_at<'a>(
        &'a self,
        path: &'a str,
        _offset: u64,
        _len: u64,
    ) -> BoxFuture<'a, Result<Vec<u8>, FileError>> {
        Box::pin(async move {
            Err(FileError(format!(
                "{path} {}: this source only streams",
                self.label()
            )))
        })
    }
}

fn join(dir: &str, name: &str) -> String {
    format!("{}/{name}", dir.trim_end_matches('/'))
}

/// The first of `paths` that exists and what the stat says, in order.
async fn first_existing(
    files: &dyn Files,
    paths: &[String],
    want_dir: bool,
) -> Result<Option<(String, PathStat)>, FileError> {
    let may = files.may_exist(paths).await?;
    for (p, may) in paths.iter().zip(may) {
        if !may {
            continue;
        }
        if let Some(st) = files.stat(p).await?
            && st.dir == want_dir
        {
            return Ok(Some((p.clone(), st)));
        }
    }
    Ok(None)
}

/// Finds the `torch` an `import torch` of the first `python3` on `PATH` gets
/// (`libnccl::python`) and reads its CUDA library's dynamic section.
async fn find_torch(
    files: &dyn Files,
    env: &PythonEnv,
    machine: Option<Machine>,
) -> Result<PythonSeen, FileError> {
    let mut seen = PythonSeen::default();
    let names = python::interpreters(env.path.as_deref());
    let Some((path, st)) = first_existing(files, &names, false).await? else {
        seen.searched = names;
        return Ok(seen);
    };
    let mut i = Interpreter {
        path,
        file: st.link,
        ..Interpreter::default()
    };
    i.version = python::version_of(&[i.file.as_deref().unwrap_or(""), &i.path]);
    for root in python::venv_roots(&i.path) {
        if let Some(cfg) = files.read_small(&join(&root, "pyvenv.cfg")).await? {
            i.venv = Some(python::parse_pyvenv(&root, &String::from_utf8_lossy(&cfg)));
            break;
        }
    }
    let dirs = i.site_dirs(env);
    seen.interpreter = Some(i);
    let inits: Vec<String> = dirs.iter().map(|d| join(d, python::TORCH_INIT)).collect();
    let may = files.may_exist(&inits).await?;
    for ((d, init), may) in dirs.iter().zip(&inits).zip(may) {
        seen.searched.push(d.clone());
        if !may || files.stat(init).await?.is_none() {
            continue;
        }
        let lib = join(d, python::TORCH_CUDA);
        let mut torch = Torch {
            package: join(d, "torch"),
            cuda_lib: None,
            dynamic: None,
            error: None,
        };
        if files.stat(&lib).await?.is_some() {
            match read_dynamic(files, &lib, machine).await? {
                Ok(dynamic) => torch.dynamic = Some(dynamic),
                Err(why) => torch.error = Some(why),
            }
            torch.cuda_lib = Some(lib);
        }
        seen.torch = Some(torch);
        break;
    }
    Ok(seen)
}

/// The most reads of a library's dynamic section at offsets (a real one takes about five).
const RANDOM_READS_MAX: usize = 256;
/// Ranges closer than this are read as one.
const READ_GAP: u64 = 64 << 10;
/// The most one read at an offset asks for.
const READ_SPAN_MAX: u64 = 4 << 20;

/// The dynamic section of a library (links followed): read at the offsets its headers name
/// where the source allows, else streamed once, or again when its strings lie behind the
/// stream; `Err` says why it is not readable.
async fn read_dynamic(
    files: &dyn Files,
    path: &str,
    want: Option<Machine>,
) -> Result<Result<Dynamic, String>, FileError> {
    let mut reader = DynamicReader::new();
    let done = if files.random_access() {
        read_dynamic_at(files, path, &mut reader).await?
    } else {
        read_dynamic_streamed(files, path, &mut reader).await?
    };
    Ok(done.and_then(|d| match (reader.machine(), want) {
        (Some(m), Some(w)) if m != w => Err(format!("built for {m}, {} is {w}", files.place())),
        _ => Ok(d),
    }))
}

async fn read_dynamic_at(
    files: &dyn Files,
    path: &str,
    reader: &mut DynamicReader,
) -> Result<Result<Dynamic, String>, FileError> {
    for _ in 0..RANDOM_READS_MAX {
        let wanted = reader.wanted();
        let Some(&(start, first_len)) = wanted.first() else {
            return Ok(reader.finish().map_err(|e| e.to_string()));
        };
        let mut end = start.saturating_add(first_len);
        for &(at, len) in &wanted[1..] {
            let to = at.saturating_add(len);
            if at > end.saturating_add(READ_GAP) || to.saturating_sub(start) > READ_SPAN_MAX {
                break;
            }
            end = end.max(to);
        }
        let bytes = files
            .read_at(path, start, end.saturating_sub(start).min(READ_SPAN_MAX))
            .await?;
        if bytes.is_empty() {
            return Ok(reader.finish().map_err(|e| e.to_string()));
        }
        match reader.feed_at(start, &bytes) {
            Ok(Feed::Done(d)) => return Ok(Ok(d)),
            Ok(_) => {}
            Err(e) => return Ok(Err(e.to_string())),
        }
    }
    Ok(Err(format!(
        "its dynamic section was not read in {RANDOM_READS_MAX} reads"
    )))
}

async fn read_dynamic_streamed(
    files: &dyn Files,
    path: &str,
    reader: &mut DynamicReader,
) -> Result<Result<Dynamic, String>, FileError> {
    let mut buf = vec![0u8; 256 * 1024];
    'pass: loop {
        let mut body = match files.open(path).await? {
            Opened::File { body, .. } => body,
            Opened::Absent => return Ok(Err("not found".into())),
            Opened::NotFile(why) => return Ok(Err(why)),
        };
        loop {
            let n = body
                .read(&mut buf)
                .await
                .map_err(|e| FileError(format!("read {path} {}: {e}", files.label())))?;
            let fed = if n == 0 {
                reader.finish().map(Feed::Done)
            } else {
                reader.feed(&buf[..n])
            };
            match fed {
                Ok(Feed::More) => {}
                Ok(Feed::Again) => {
                    reader.again();
                    continue 'pass;
                }
                Ok(Feed::Done(d)) => return Ok(Ok(d)),
                Err(e) => return Ok(Err(e.to_string())),
            }
        }
    }
}

/// What reading one candidate gave.
pub enum LibRead {
    Absent,
    Skip(String),
    Lib {
        path: String,
        machine: Machine,
        version: Option<crate::libnccl::LibVersion>,
    },
}

/// Reads a candidate: absent, skipped (not ELF, another machine), or the library with its
/// build string (read until found, then the stream is dropped).
async fn read_lib(
    files: &dyn Files,
    path: &str,
    want: Option<Machine>,
) -> Result<LibRead, FileError> {
    let (at, body) = match files.open(path).await? {
        Opened::Absent => return Ok(LibRead::Absent),
        Opened::NotFile(why) => return Ok(LibRead::Skip(why)),
        Opened::File { path, body } => (path, body),
    };
    scan_lib(body, want, files.place())
        .await
        .map(|r| match r {
            LibRead::Lib {
                machine, version, ..
            } => LibRead::Lib {
                path: at.clone(),
                machine,
                version,
            },
            other => other,
        })
        .map_err(|x| FileError(format!("read {at} {}: {x}", files.label())))
}

/// The ELF header and NCCL's build string of a library read from `r`.
pub async fn scan_lib<R: AsyncRead + Unpin>(
    mut r: R,
    want: Option<Machine>,
    place: &str,
) -> std::io::Result<LibRead> {
    let mut buf = vec![0u8; 256 * 1024];
    let mut head = Vec::new();
    let mut scanner = Scanner::new();
    let mut machine = None;
    loop {
        let n = r.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        let chunk = &buf[..n];
        if machine.is_none() {
            head.extend_from_slice(&chunk[..chunk.len().min(64 - head.len().min(64))]);
            if head.len() >= 20 {
                match loader::accepts_in(&head, want, place) {
                    Ok(m) => machine = Some(m),
                    Err(why) => return Ok(LibRead::Skip(why)),
                }
            }
        }
        if scanner.feed(chunk).is_some() && machine.is_some() {
            break;
        }
    }
    let Some(machine) = machine else {
        return Ok(LibRead::Skip("not an ELF file".to_string()));
    };
    Ok(LibRead::Lib {
        path: String::new(),
        machine,
        version: scanner.finish().cloned(),
    })
}
