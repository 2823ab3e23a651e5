//! Reading the NCCL a container of an image would load, on one engine, without starting
//! anything: a container is created (never started) with the image and the job's loader
//! variables and NCCL mounts, its `/etc/ld.so.cache` and `/etc/ld.so.preload` are read through
//! the engine's archive API, and each path the loader would try (`libnccl::loader::candidates`)
//! is streamed until its ELF header and NCCL's build string are read — a few MiB of a file of
//! hundreds, then the stream is dropped. The container is removed in every case.
//!
//! The engine's PyTorch is looked for the same way, unless a preloaded NCCL comes first: the
//! first `python3` on the image's `PATH` and its site folders (`libnccl::python`) are looked
//! at with the archive API's stat (no file is read but a `pyvenv.cfg`), and the first
//! `torch/lib/libtorch_cuda.so` found is streamed to its dynamic section (`libnccl::elf`; in a
//! wheel the section is near the end, so most of the file goes by, once per image ID). Its
//! RPATH then orders the candidates (`libnccl::loader::candidates_for`). A running job's
//! container is read the same way, in place (`resolve_container`, for `status`).
//!
//! The walk itself is `probe::nccl::walk`, over the container's files here: a node's own
//! files (`--runtime host`) are read by the same walk, so exactly as an image's.
//!
//! Also: the same read of a library on the node itself (`--nccl-from PATH`, through the node's
//! shell), and filling the named volume `--nccl-from IMAGE` mounts (a short container copies the
//! image's `libnccl.so.2` into it). Effects only; what to judge is `libnccl::check`'s.

use std::collections::HashMap;
use std::time::Duration;

use bollard::query_parameters::DownloadFromContainerOptionsBuilder;
use bytes::Bytes;
use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use tokio::io::{AsyncRead, AsyncReadExt};
use tokio_util::io::StreamReader;
use tokio_util::sync::CancellationToken;

use super::engine::Engine;
use super::error::{RuntimeError, describe_bollard, status_of};
use super::shell::NodeShell;
use crate::libnccl::loader::{Machine, Resolution, Via, lexical};
use crate::libnccl::python::PythonEnv;
use crate::node::{NodeName, Role};
use crate::plan::spec::{ContainerSpec, JobName, Mount, MountKind};
use crate::probe::nccl::{FileError, Files, LibRead, LoaderVars, Opened, PathStat, scan_lib, walk};

/// The job label of the short-lived containers made here.
pub const PROBE_JOB: &str = "nccl-probe";
/// A symlink chain longer than this is a loop.
const MAX_LINKS: usize = 16;
/// How long the copy into a `--nccl-from` volume may take.
const STAGE_TIMEOUT: Duration = Duration::from_secs(600);
/// Label on a `--nccl-from` volume: the image ID its library was copied from.
pub const LABEL_NCCL_IMAGE: &str = "dev.spark-launch.nccl-image-id";

/// What the probe container is made of: the image, the job's loader variables over the
/// image's own, and the job's NCCL mounts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LoaderProbe {
    pub image: String,
    /// `LD_LIBRARY_PATH` the job sets (over the image's), if any.
    pub ld_library_path: Option<String>,
    /// `LD_PRELOAD` the job sets (over the image's), if any.
    pub ld_preload: Option<String>,
    pub mounts: Vec<Mount>,
}

/// What one image says about itself, for the loader (and where its Python looks).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageLoader {
    /// The image ID (the digest of its config): the cache key.
    pub id: String,
    pub machine: Option<Machine>,
    pub ld_library_path: Option<String>,
    pub ld_preload: Option<String>,
    /// `PATH`, `PYTHONPATH`, `HOME`.
    pub python: PythonEnv,
}

/// The value of `key` in a `KEY=value` environment list.
fn env_var(env: &[String], key: &str) -> Option<String> {
    env.iter()
        .find_map(|e| e.strip_prefix(key)?.strip_prefix('=').map(str::to_string))
}

fn python_env(env: &[String]) -> PythonEnv {
    PythonEnv {
        path: env_var(env, "PATH"),
        pythonpath: env_var(env, "PYTHONPATH"),
        home: env_var(env, "HOME"),
    }
}

/// The image's ID, architecture and loader variables; `None` when the engine does not have it.
pub async fn image_loader(
    engine: &Engine,
    image: &str,
) -> Result<Option<ImageLoader>, RuntimeError> {
    let i = match engine.docker().inspect_image(image).await {
        Ok(i) => i,
        Err(e) if status_of(&e) == Some(404) => return Ok(None),
        Err(e) => return Err(RuntimeError::api(format!("inspect image {image}"), e)),
    };
    let env: Vec<String> = i.config.and_then(|c| c.env).unwrap_or_default();
    Ok(Some(ImageLoader {
        id: i.id.unwrap_or_default(),
        machine: i.architecture.as_deref().and_then(Machine::from_arch),
        ld_library_path: env_var(&env, "LD_LIBRARY_PATH"),
        ld_preload: env_var(&env, "LD_PRELOAD"),
        python: python_env(&env),
    }))
}

/// What an existing container (a running job's) says of itself for the loader: an
/// [`ImageLoader`] of its image ID with the container's own variables, its container ID, and
/// whether an NCCL folder is mounted into it (`--nccl-from`). `None` when it is gone.
pub async fn container_loader(
    engine: &Engine,
    container: &str,
) -> Result<Option<(ImageLoader, String, bool)>, RuntimeError> {
    let Some(c) = engine.inspect(container).await? else {
        return Ok(None);
    };
    let env: Vec<String> = c.config.and_then(|c| c.env).unwrap_or_default();
    let id = c.image.unwrap_or_default();
    let machine = image_loader(engine, &id).await?.and_then(|i| i.machine);
    let mounted = c.mounts.unwrap_or_default().iter().any(|m| {
        m.destination
            .as_deref()
            .is_some_and(|d| d.trim_end_matches('/') == crate::libnccl::MOUNT_DIR)
    });
    let loader = ImageLoader {
        id,
        machine,
        ld_library_path: env_var(&env, "LD_LIBRARY_PATH"),
        ld_preload: env_var(&env, "LD_PRELOAD"),
        python: python_env(&env),
    };
    Ok(Some((loader, c.id.unwrap_or_default(), mounted)))
}

/// What an existing container loads, read in place (its files, its variables as
/// [`container_loader`] gave them).
pub async fn resolve_container(
    engine: &Engine,
    container: &str,
    loader: &ImageLoader,
) -> Result<Resolution, RuntimeError> {
    resolve_in(engine, container, &LoaderProbe::default(), loader).await
}

fn unique_name(node: &NodeName) -> String {
    use std::sync::atomic::{AtomicUsize, Ordering};
    static N: AtomicUsize = AtomicUsize::new(0);
    format!(
        "sl-{PROBE_JOB}-{node}-{}x{}",
        std::process::id(),
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// Resolves `libnccl.so.2` in a container of `probe` on `engine`, as its loader would.
pub async fn resolve(
    engine: &Engine,
    probe: &LoaderProbe,
    image: &ImageLoader,
) -> Result<Resolution, RuntimeError> {
    let job = JobName::new(PROBE_JOB).map_err(|e| RuntimeError::Other(e.to_string()))?;
    let mut spec = ContainerSpec::new(&job, engine.node(), Role::Worker, &probe.image);
    spec.name = unique_name(engine.node());
    // Never started; a command only so that an image without one can be created.
    spec.entrypoint = Some(vec!["/bin/sh".to_string()]);
    spec.mounts = probe.mounts.clone();
    engine.create(&spec).await?;
    let result = resolve_in(engine, &spec.name, probe, image).await;
    if let Err(e) = engine.remove(&spec.name, Duration::ZERO).await {
        tracing::warn!(
            "{}: could not remove the probe container {}: {e}",
            engine.node(),
            spec.name
        );
    }
    result
}

async fn resolve_in(
    engine: &Engine,
    container: &str,
    probe: &LoaderProbe,
    image: &ImageLoader,
) -> Result<Resolution, RuntimeError> {
    let files = ContainerFiles { engine, container };
    let vars = LoaderVars {
        ld_preload: probe.ld_preload.clone().or(image.ld_preload.clone()),
        ld_library_path: probe
            .ld_library_path
            .clone()
            .or(image.ld_library_path.clone()),
    };
    let w = walk(&files, &vars, &image.python, image.machine)
        .await
        .map_err(|e| RuntimeError::Other(e.to_string()))?;
    let otherwise = match &w.loads {
        Some(f) if matches!(f.via, Via::Rpath | Via::Runpath) => {
            w.plain.filter(|o| o.path != f.path).map(Box::new)
        }
        _ => None,
    };
    Ok(Resolution {
        loads: w.loads,
        skipped: w.skipped,
        python: w.python,
        otherwise,
    })
}

/// A container's files through the engine's archive API.
struct ContainerFiles<'a> {
    engine: &'a Engine,
    container: &'a str,
}

impl Files for ContainerFiles<'_> {
    fn place(&self) -> &'static str {
        "the container"
    }

    fn label(&self) -> String {
        format!("in {}", self.container)
    }

    fn stat<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Option<PathStat>, FileError>> {
        Box::pin(async move { Ok(stat(self.engine, self.container, path).await?) })
    }

    fn read_small<'a>(
        &'a self,
        path: &'a str,
    ) -> BoxFuture<'a, Result<Option<Vec<u8>>, FileError>> {
        Box::pin(async move { Ok(read_small(self.engine, self.container, path).await?) })
    }

    fn open<'a>(&'a self, path: &'a str) -> BoxFuture<'a, Result<Opened, FileError>> {
        Box::pin(async move { Ok(open_file(self.engine, self.container, path).await?) })
    }
}

impl From<RuntimeError> for FileError {
    fn from(e: RuntimeError) -> Self {
        FileError(e.to_string())
    }
}

async fn stat(
    engine: &Engine,
    container: &str,
    path: &str,
) -> Result<Option<PathStat>, RuntimeError> {
    let options = bollard::query_parameters::ContainerArchiveInfoOptionsBuilder::new()
        .path(path)
        .build();
    match engine
        .docker()
        .get_container_archive_info(container, Some(options))
        .await
    {
        Ok(s) => Ok(Some(PathStat {
            // Go's os.ModeDir.
            dir: s.file_mode & (1 << 31) != 0,
            link: (!s.link_target.is_empty()).then_some(s.link_target),
        })),
        Err(e) if status_of(&e) == Some(404) => Ok(None),
        Err(e) => Err(RuntimeError::api(format!("stat {path} in {container}"), e)),
    }
}

/// One entry of a tar stream, as far as this module needs it.
#[derive(Debug, PartialEq, Eq)]
struct Entry {
    kind: u8,
    size: u64,
    link: String,
}

fn octal(field: &[u8]) -> Option<u64> {
    // GNU base-256 for large sizes.
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        let mut v: u64 = u64::from(field[0] & 0x7f);
        for b in &field[1..] {
            v = v.checked_mul(256)?.checked_add(u64::from(*b))?;
        }
        return Some(v);
    }
    let t: String = field
        .iter()
        .take_while(|b| **b != 0)
        .map(|b| *b as char)
        .collect();
    let t = t.trim();
    if t.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(t, 8).ok()
}

fn cstr(field: &[u8]) -> String {
    let end = field.iter().position(|b| *b == 0).unwrap_or(field.len());
    String::from_utf8_lossy(&field[..end]).into_owned()
}

/// A 512-byte tar header: type, size, link target. `None` for the end-of-archive block.
fn header(block: &[u8; 512]) -> Result<Option<Entry>, String> {
    if block.iter().all(|b| *b == 0) {
        return Ok(None);
    }
    let size = octal(&block[124..136]).ok_or("a tar header with an unreadable size")?;
    Ok(Some(Entry {
        kind: block[156],
        size,
        link: cstr(&block[157..257]),
    }))
}

/// PAX records (`LEN key=value\n`): the `linkpath` and `size` that override the header's.
fn pax(data: &[u8]) -> (Option<String>, Option<u64>) {
    let text = String::from_utf8_lossy(data);
    let (mut link, mut size) = (None, None);
    for rec in text.split('\n') {
        let Some((_, kv)) = rec.split_once(' ') else {
            continue;
        };
        if let Some(v) = kv.strip_prefix("linkpath=") {
            link = Some(v.to_string());
        } else if let Some(v) = kv.strip_prefix("size=") {
            size = v.parse().ok();
        }
    }
    (link, size)
}

/// Skips an entry's `n` bytes of data and the padding to the next 512-byte block.
async fn skip<R: AsyncRead + Unpin>(r: &mut R, n: u64) -> std::io::Result<()> {
    let padded = n.div_ceil(512) * 512;
    let copied = tokio::io::copy(&mut r.take(padded), &mut tokio::io::sink()).await?;
    if copied < padded {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(())
}

/// Reads an entry's data (at most 64 MiB are kept) and skips its padding.
async fn read_padded<R: AsyncRead + Unpin>(r: &mut R, n: u64) -> std::io::Result<Vec<u8>> {
    let keep = n.min(64 << 20);
    let mut data = vec![0u8; usize::try_from(keep).unwrap_or(0)];
    r.read_exact(&mut data).await?;
    let rest = n.div_ceil(512) * 512 - keep;
    let copied = tokio::io::copy(&mut r.take(rest), &mut tokio::io::sink()).await?;
    if copied < rest {
        return Err(std::io::ErrorKind::UnexpectedEof.into());
    }
    Ok(data)
}

/// The first real entry of the archive: PAX and GNU long-name headers folded into it.
async fn first_entry<R: AsyncRead + Unpin>(r: &mut R) -> Result<Option<Entry>, String> {
    let io = |e: std::io::Error| e.to_string();
    let (mut link, mut size) = (None, None);
    loop {
        let mut block = [0u8; 512];
        r.read_exact(&mut block).await.map_err(io)?;
        let Some(mut e) = header(&block)? else {
            return Ok(None);
        };
        match e.kind {
            b'x' => {
                let data = read_padded(r, e.size).await.map_err(io)?;
                let (l, s) = pax(&data);
                link = l.or(link);
                size = s.or(size);
            }
            b'g' | b'L' => skip(r, e.size).await.map_err(io)?,
            b'K' => {
                let data = read_padded(r, e.size).await.map_err(io)?;
                link = Some(cstr(&data));
            }
            _ => {
                if let Some(l) = link {
                    e.link = l;
                }
                if let Some(s) = size {
                    e.size = s;
                }
                return Ok(Some(e));
            }
        }
    }
}

/// The archive of one path in the container, as a byte stream; `None` when it does not exist.
async fn archive(
    engine: &Engine,
    container: &str,
    path: &str,
) -> Result<Option<BoxStream<'static, std::io::Result<Bytes>>>, RuntimeError> {
    let options = DownloadFromContainerOptionsBuilder::new()
        .path(path)
        .build();
    let mut s = engine
        .docker()
        .download_from_container(container, Some(options))
        .boxed();
    // The engine answers 404 at once for a missing path: look at the first item.
    let first = match s.next().await {
        None => return Ok(None),
        Some(Err(e)) if status_of(&e) == Some(404) => return Ok(None),
        Some(Err(e)) => return Err(RuntimeError::api(format!("read {path} in {container}"), e)),
        Some(Ok(b)) => b,
    };
    let rest = s.map(|r| r.map_err(|e| std::io::Error::other(describe_bollard(&e))));
    Ok(Some(
        futures::stream::once(async move { Ok(first) })
            .chain(rest)
            .boxed(),
    ))
}

/// A small file of the container (following symlinks), `None` when absent.
async fn read_small(
    engine: &Engine,
    container: &str,
    path: &str,
) -> Result<Option<Vec<u8>>, RuntimeError> {
    let mut at = path.to_string();
    for _ in 0..MAX_LINKS {
        let Some(s) = archive(engine, container, &at).await? else {
            return Ok(None);
        };
        let mut r = StreamReader::new(s);
        let err = |e: String| RuntimeError::Other(format!("read {at} in {container}: {e}"));
        let Some(e) = first_entry(&mut r).await.map_err(err)? else {
            return Ok(None);
        };
        match e.kind {
            b'2' => at = link_target(&at, &e.link),
            b'0' | 0 | b'7' => {
                let data = read_padded(&mut r, e.size)
                    .await
                    .map_err(|x| err(x.to_string()))?;
                return Ok(Some(data));
            }
            _ => return Ok(None),
        }
    }
    Ok(None)
}

/// Where a symlink at `path` pointing to `target` leads (in the container's root).
fn link_target(path: &str, target: &str) -> String {
    if target.starts_with('/') {
        return lexical(target);
    }
    let dir = path.rsplit_once('/').map(|(d, _)| d).unwrap_or("");
    lexical(&format!("{dir}/{target}"))
}

async fn open_file(engine: &Engine, container: &str, path: &str) -> Result<Opened, RuntimeError> {
    let mut at = path.to_string();
    for _ in 0..MAX_LINKS {
        let Some(s) = archive(engine, container, &at).await? else {
            return Ok(Opened::Absent);
        };
        let mut r = StreamReader::new(s);
        let err = |e: String| RuntimeError::Other(format!("read {at} in {container}: {e}"));
        let Some(e) = first_entry(&mut r).await.map_err(err)? else {
            return Ok(Opened::Absent);
        };
        match e.kind {
            b'2' => at = link_target(&at, &e.link),
            b'0' | 0 | b'7' => {
                return Ok(Opened::File {
                    path: at,
                    body: Box::pin(r.take(e.size)),
                });
            }
            _ => return Ok(Opened::NotFile("not a file".to_string())),
        }
    }
    Ok(Opened::NotFile(format!(
        "more than {MAX_LINKS} symbolic links"
    )))
}

/// A library on the node itself (`--nccl-from PATH`): its machine and build string, read
/// through the node's shell (`cat`, dropped once the string is found).
pub async fn read_host_lib(
    shell: &dyn NodeShell,
    path: &str,
) -> Result<(Machine, Option<crate::libnccl::LibVersion>), RuntimeError> {
    let q = crate::quote::quote(path, crate::quote::Style::Minimal)?;
    let stream = shell
        .stream(&format!("exec cat -- {q}"))
        .map(|r| r.map_err(|e| std::io::Error::other(e.to_string())));
    let r = StreamReader::new(stream.boxed());
    match scan_lib(r, None, "the node").await {
        Ok(LibRead::Lib {
            machine, version, ..
        }) => Ok((machine, version)),
        Ok(LibRead::Skip(why)) if why == "not an ELF file" => Err(RuntimeError::Other(format!(
            "cannot read {path} on {} (missing, unreadable or not a library)",
            shell.node()
        ))),
        Ok(LibRead::Skip(why)) => Err(RuntimeError::Other(format!(
            "{path} on {}: {why}",
            shell.node()
        ))),
        Ok(LibRead::Absent) => Err(RuntimeError::Other(format!(
            "{path} is not on {}",
            shell.node()
        ))),
        Err(e) => Err(RuntimeError::Other(format!(
            "read {path} on {}: {e}",
            shell.node()
        ))),
    }
}

/// The named volume `--nccl-from IMAGE` mounts holds `libnccl.so.2` copied from `image` (as the
/// image's own loader resolves it, `source`); filled when missing or copied from another
/// image ID. Returns whether it was (re)filled.
pub async fn stage_volume(
    engine: &Engine,
    image: &ImageLoader,
    image_ref: &str,
    source: &str,
    volume: &str,
    cancel: &CancellationToken,
) -> Result<bool, RuntimeError> {
    let docker = engine.docker();
    let current = match docker.inspect_volume(volume).await {
        Ok(v) => v.labels.get(LABEL_NCCL_IMAGE).cloned(),
        Err(e) if status_of(&e) == Some(404) => None,
        Err(e) => return Err(RuntimeError::api(format!("inspect volume {volume}"), e)),
    };
    if current.as_deref() == Some(image.id.as_str()) {
        return Ok(false);
    }
    if current.is_some() {
        // Copied from another build of the image: replace it (refused while a job uses it).
        docker
            .remove_volume(volume, None::<bollard::query_parameters::RemoveVolumeOptions>)
            .await
            .map_err(|e| {
                RuntimeError::Other(format!(
                    "volume {volume} holds the NCCL of an older {image_ref} and cannot be replaced: {}; fix: stop the job that uses it (`spark-launch status`)",
                    describe_bollard(&e)
                ))
            })?;
    }
    let mut labels = HashMap::new();
    labels.insert(
        crate::plan::spec::LABEL_JOB.to_string(),
        PROBE_JOB.to_string(),
    );
    labels.insert(LABEL_NCCL_IMAGE.to_string(), image.id.clone());
    labels.insert(
        "dev.spark-launch.nccl-image".to_string(),
        image_ref.to_string(),
    );
    docker
        .create_volume(bollard::models::VolumeCreateRequest {
            name: Some(volume.to_string()),
            labels: Some(labels),
            ..Default::default()
        })
        .await
        .map_err(|e| RuntimeError::api(format!("create volume {volume}"), e))?;
    let job = JobName::new(PROBE_JOB).map_err(|e| RuntimeError::Other(e.to_string()))?;
    let mut spec = ContainerSpec::new(&job, engine.node(), Role::Worker, image_ref);
    spec.name = unique_name(engine.node());
    spec.entrypoint = Some(vec!["/bin/sh".to_string(), "-c".to_string()]);
    spec.command = vec![
        "set -e; cp -L \"$0\" /sl-nccl/.libnccl.so.2.tmp; mv /sl-nccl/.libnccl.so.2.tmp /sl-nccl/libnccl.so.2; ln -sf libnccl.so.2 /sl-nccl/libnccl.so".to_string(),
        source.to_string(),
    ];
    spec.mounts = vec![Mount {
        source: volume.to_string(),
        target: "/sl-nccl".to_string(),
        read_only: false,
        kind: MountKind::Volume,
    }];
    spec.network = crate::plan::spec::NetworkMode::Host;
    let copied = async {
        engine.run(&spec).await?;
        let code = engine.wait_exit(&spec.name, STAGE_TIMEOUT, cancel).await?;
        if code != 0 {
            let log = container_log(engine, &spec.name).await;
            return Err(RuntimeError::Other(format!(
                "copy {source} of {image_ref} into volume {volume}: exit {code}: {log}"
            )));
        }
        Ok(())
    }
    .await;
    let _ = engine.remove(&spec.name, Duration::ZERO).await;
    if let Err(e) = copied {
        let _ = docker
            .remove_volume(
                volume,
                None::<bollard::query_parameters::RemoveVolumeOptions>,
            )
            .await;
        return Err(e);
    }
    Ok(true)
}

async fn container_log(engine: &Engine, name: &str) -> String {
    let mut s = Box::pin(engine.logs(name, false, false));
    let mut out = Vec::new();
    while let Some(Ok(c)) = s.next().await {
        out.extend_from_slice(&c.bytes);
    }
    let text = String::from_utf8_lossy(&out);
    text.trim()
        .lines()
        .last()
        .unwrap_or("no output")
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(kind: u8, size: u64, link: &str) -> [u8; 512] {
        let mut b = [0u8; 512];
        b[..4].copy_from_slice(b"file");
        let s = format!("{size:011o}\0");
        b[124..136].copy_from_slice(s.as_bytes());
        b[156] = kind;
        b[157..157 + link.len()].copy_from_slice(link.as_bytes());
        b
    }

    #[test]
    fn symlink_targets_resolve_against_the_link_folder() {
        assert_eq!(
            link_target(
                "/usr/lib/x86_64-linux-gnu/libnccl.so.2",
                "libnccl.so.2.28.9"
            ),
            "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.9"
        );
        assert_eq!(
            link_target("/opt/nccl/lib/libnccl.so.2", "../../x/libnccl.so"),
            "/opt/x/libnccl.so"
        );
        assert_eq!(link_target("/a/b", "/abs/c"), "/abs/c");
    }

    #[tokio::test]
    async fn the_first_entry_of_an_archive_folds_pax_headers_in() {
        let mut tar = Vec::new();
        let rec = "30 linkpath=libnccl.so.2.30.7\n";
        tar.extend(block(b'x', rec.len() as u64, ""));
        let mut data = rec.as_bytes().to_vec();
        data.resize(512, 0);
        tar.extend(data);
        tar.extend(block(b'2', 0, "short"));
        tar.extend([0u8; 1024]);
        let mut r = &tar[..];
        let e = first_entry(&mut r).await.unwrap().unwrap();
        assert_eq!(e.kind, b'2');
        assert_eq!(e.link, "libnccl.so.2.30.7");
        let mut empty = &[0u8; 1024][..];
        assert_eq!(first_entry(&mut empty).await.unwrap(), None);
    }

    #[tokio::test]
    async fn a_library_is_read_until_its_version_and_other_files_are_skipped() {
        let mut lib = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0];
        lib.extend([0u8; 10]);
        lib.extend(62u16.to_le_bytes());
        lib.extend(vec![0u8; 300_000]);
        lib.extend(b"NCCL version 2.30.7+cuda13.3\0");
        let r = scan_lib(&lib[..], Some(Machine::Amd64), "the container")
            .await
            .unwrap();
        let LibRead::Lib {
            machine, version, ..
        } = r
        else {
            panic!("not read")
        };
        assert_eq!(machine, Machine::Amd64);
        assert_eq!(version.unwrap().to_string(), "2.30.7+cuda13.3");
        let r = scan_lib(&lib[..], Some(Machine::Arm64), "the container")
            .await
            .unwrap();
        assert!(matches!(r, LibRead::Skip(w) if w == "built for amd64, the container is arm64"));
        let r = scan_lib(
            &b"#!/bin/sh\necho not a library at all"[..],
            None,
            "the node",
        )
        .await
        .unwrap();
        assert!(matches!(r, LibRead::Skip(_)));
    }
}
