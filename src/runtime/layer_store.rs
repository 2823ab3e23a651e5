//! An image read straight from the engine's classic layer store on this machine, as a
//! `docker load` archive holding only the layers asked for: what `image push` sends when it
//! can, instead of the engine's export.
//!
//! ## Why
//!
//! Docker 20.10–24 with the classic store exports an image (`GET /images/{name}/get`) by first
//! writing every layer of it to a temporary folder: updating one 64 MiB layer of a 1 GiB image
//! waits about 6 s for an export of the whole gigabyte (`bench/RESULTS-issue14.md`). The store
//! keeps what the export is made of: per layer (by chain ID, under `image/<driver>/layerdb`)
//! the layer's files (`<driver>/<cache-id>/diff`) and its `tar-split.json.gz`, the tar's
//! headers and padding verbatim with a placeholder for each file's bytes. Replaying that
//! record with the files' bytes rebuilds the layer tar bit for bit: the engine's own export
//! does exactly this (moby `layer.TarStream`, vbatts/tar-split `asm`).
//!
//! ## When it is used
//!
//! Only when everything can be checked before the first byte: the driver keeps layers as
//! `<id>/diff` folders (overlay2, fuse-overlayfs), this process can read the engine's root
//! folder (root, or a rootless engine's own folder), the image's config in the store hashes to
//! the image ID, every wanted layer's recorded diff ID is the image's, and every file the
//! record names lies inside its layer folder with the recorded size, reached without following
//! a link: each folder is opened relative to its parent with `O_NOFOLLOW`, then the file (a
//! layer may hold `lnk -> /etc` beside a record naming `lnk/passwd`: read naively, that would
//! stream this machine's file), so a path through a link is refused too. Anything else (the
//! containerd image store, an engine on another machine, no permission) is an
//! [`LayerStoreError`] and the caller exports through the engine as before. The receiving
//! engine checks each layer's digest on load, and `images` checks the loaded image's
//! content, so a wrong byte can only fail a push, never land.
//!
//! The archive: `blobs/sha256/<hex>` entries for the config and each wanted layer, and a
//! `manifest.json` listing every layer (a `docker load` reads only the layers whose chain the
//! engine lacks). Memory is constant: the records are read line by line, file bytes in chunks.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs::File;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};

use base64::Engine as _;
use bytes::{Bytes, BytesMut};
use futures::Stream;
use serde::Deserialize;
use tokio::sync::mpsc;

use super::error::RuntimeError;
use super::features::EngineFeatures;
use crate::digest::{sha256_hex, sha256_hex_of};
use crate::plan::ImageFacts;
use crate::plan::layers::chain_ids;

/// Bytes per chunk handed to the stream.
const CHUNK: usize = 1 << 20;
/// Chunks in flight between the reading thread and the stream.
const DEPTH: usize = 4;
const BLOCK: u64 = 512;

/// Why the store cannot give this image (the caller then exports through the engine).
#[derive(Debug, thiserror::Error)]
pub enum LayerStoreError {
    #[error("the {0} storage driver keeps no layer folders spark-launch reads")]
    Driver(String),
    #[error("{reference} is not named by a tag (a `docker load` archive needs one)")]
    Untagged { reference: String },
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: {what}", path.display())]
    Mismatch { path: PathBuf, what: String },
    #[error("the push stopped reading")]
    Stopped,
}

fn read_err(path: &Path) -> impl FnOnce(std::io::Error) -> LayerStoreError + '_ {
    move |source| LayerStoreError::Read {
        path: path.to_path_buf(),
        source,
    }
}

fn mismatch(path: &Path, what: impl Into<String>) -> LayerStoreError {
    LayerStoreError::Mismatch {
        path: path.to_path_buf(),
        what: what.into(),
    }
}

/// The classic store of one engine, on this machine.
#[derive(Clone, Debug)]
pub struct LayerStore {
    /// `<root>/image/<driver>`: image configs and layer records.
    meta: PathBuf,
    /// `<root>/<driver>`: the layers' folders.
    layers: PathBuf,
}

impl LayerStore {
    /// The store of the engine described by `features`, if its driver keeps `<id>/diff`
    /// folders. Whether this machine holds it is checked by [`LayerStore::archive`].
    pub fn of(features: &EngineFeatures) -> Result<LayerStore, LayerStoreError> {
        let driver = features.storage_driver.as_str();
        if !matches!(driver, "overlay2" | "fuse-overlayfs") || features.root_dir.is_empty() {
            return Err(LayerStoreError::Driver(driver.to_string()));
        }
        let root = Path::new(&features.root_dir);
        Ok(LayerStore {
            meta: root.join("image").join(driver),
            layers: root.join(driver),
        })
    }

    /// Checks everything the archive needs (see the module doc) and returns it, not yet read.
    /// `wanted`: indices into `image.layers` to include. Blocking file reads: run it off the
    /// async threads.
    pub fn archive(
        &self,
        image: &ImageFacts,
        wanted: &BTreeSet<usize>,
    ) -> Result<Archive, LayerStoreError> {
        let tag = repo_tag(&image.reference).ok_or_else(|| LayerStoreError::Untagged {
            reference: image.reference.clone(),
        })?;
        let config_hex = sha256_hex_of(&image.id)
            .ok_or_else(|| mismatch(&self.meta, format!("image ID {} is not sha256", image.id)))?;
        let config_path = self.meta.join("imagedb/content/sha256").join(config_hex);
        let config = read_small(&config_path)?;
        if sha256_hex(&config) != config_hex {
            return Err(mismatch(&config_path, "does not hash to the image ID"));
        }
        let parsed: ConfigRootFs = serde_json::from_slice(&config)
            .map_err(|e| mismatch(&config_path, format!("not an image config: {e}")))?;
        if parsed.rootfs.diff_ids != image.layers {
            return Err(mismatch(&config_path, "lists other layers than the engine"));
        }
        let chains = chain_ids(&image.layers);
        let mut entries = vec![Entry::Small {
            name: format!("blobs/sha256/{config_hex}"),
            data: config,
        }];
        let mut layer_names = Vec::new();
        for (i, diff_id) in image.layers.iter().enumerate() {
            let diff_hex = sha256_hex_of(diff_id).ok_or_else(|| {
                mismatch(&config_path, format!("diff ID {diff_id} is not sha256"))
            })?;
            let name = format!("blobs/sha256/{diff_hex}");
            layer_names.push(name.clone());
            if !wanted.contains(&i) {
                continue;
            }
            let record = self
                .meta
                .join("layerdb/sha256")
                .join(sha256_hex_of(&chains[i]).unwrap_or_default());
            let recorded = read_small(&record.join("diff"))?;
            if recorded.trim_ascii() != diff_id.as_bytes() {
                return Err(mismatch(
                    &record,
                    format!("holds another layer than {diff_id}"),
                ));
            }
            let cache_id = read_small(&record.join("cache-id"))?;
            let cache_id = std::str::from_utf8(cache_id.trim_ascii())
                .ok()
                .filter(|c| !c.is_empty() && !c.contains('/') && !c.starts_with('.'))
                .ok_or_else(|| mismatch(&record, "unreadable cache-id"))?;
            let split = record.join("tar-split.json.gz");
            let dir = self.layers.join(cache_id).join("diff");
            let size = replay(&split, &dir, &mut |_| Ok(()))?;
            entries.push(Entry::Layer {
                name,
                split,
                dir,
                size,
            });
        }
        let manifest = serde_json::json!([{
            "Config": format!("blobs/sha256/{config_hex}"),
            "RepoTags": [tag],
            "Layers": layer_names,
        }]);
        entries.push(Entry::Small {
            name: "manifest.json".to_string(),
            data: manifest.to_string().into_bytes(),
        });
        Ok(Archive { entries })
    }
}

/// `name:tag` for a `docker load` manifest (`:latest` added as the CLI does), or `None` for
/// an image ID, something that may be a short one (only hex digits), or a digest reference.
fn repo_tag(reference: &str) -> Option<String> {
    let maybe_id = reference.bytes().all(|b| b.is_ascii_hexdigit());
    if maybe_id || reference.contains('@') || reference.starts_with("sha256:") {
        return None;
    }
    let last = reference.rsplit('/').next().unwrap_or(reference);
    if last.contains(':') {
        Some(reference.to_string())
    } else {
        Some(format!("{reference}:latest"))
    }
}

#[derive(Deserialize)]
struct ConfigRootFs {
    rootfs: RootFs,
}

#[derive(Deserialize)]
struct RootFs {
    #[serde(default)]
    diff_ids: Vec<String>,
}

/// A metadata file of the store (a config, a diff ID, a cache ID): at most 16 MiB.
fn read_small(path: &Path) -> Result<Vec<u8>, LayerStoreError> {
    let mut data = Vec::new();
    File::open(path)
        .and_then(|f| f.take(16 << 20).read_to_end(&mut data))
        .map_err(read_err(path))?;
    Ok(data)
}

/// One line of a tar-split record (`storage.Entry`): type 1 a file's bytes (by name), type 2
/// raw tar bytes (headers, padding, the end of the archive).
#[derive(Deserialize)]
struct SplitEntry {
    #[serde(rename = "type")]
    kind: u8,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    name_raw: Option<String>,
    #[serde(default)]
    size: u64,
    #[serde(default)]
    payload: Option<String>,
}

/// What a record asks for next.
enum Piece<'a> {
    Raw(Vec<u8>),
    /// A file's bytes: `file` was opened without following a link (see [`open_beneath`]).
    File {
        path: &'a Path,
        file: File,
        size: u64,
    },
}

/// Opens the file `rel` (plain components only) of the layer folder `dir` without following a
/// link anywhere below `dir`: every folder is opened relative to its parent with `O_NOFOLLOW |
/// O_DIRECTORY`, then the file with `O_NOFOLLOW` (and `O_NONBLOCK`, so a FIFO cannot hang the
/// read); it must be a regular file. A refusal is a [`LayerStoreError::Mismatch`] naming the
/// part that is a link, and the caller exports through the engine instead.
fn open_beneath(dir: &Path, rel: &Path) -> Result<File, LayerStoreError> {
    use nix::errno::Errno;
    use nix::fcntl::{OFlag, openat};
    use nix::sys::stat::Mode;
    use std::os::fd::OwnedFd;

    let parts: Vec<&OsStr> = rel
        .components()
        .filter_map(|c| match c {
            Component::Normal(p) => Some(p),
            _ => None,
        })
        .collect();
    let Some((name, folders)) = parts.split_last() else {
        return Err(mismatch(&dir.join(rel), "names no file"));
    };
    let refused = |upto: usize, e: Errno| {
        let shown: PathBuf = parts[..=upto].iter().collect();
        let path = dir.join(&shown);
        match e {
            Errno::ELOOP | Errno::ENOTDIR => mismatch(
                &path,
                "is a link (or not a folder): a layer's files are read without following links",
            ),
            e => LayerStoreError::Read {
                path,
                source: e.into(),
            },
        }
    };
    let mut at: OwnedFd = File::open(dir).map_err(read_err(dir))?.into();
    let folder = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    for (i, part) in folders.iter().enumerate() {
        at = openat(&at, *part, folder, Mode::empty()).map_err(|e| refused(i, e))?;
    }
    let file = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    let fd = openat(&at, *name, file, Mode::empty()).map_err(|e| refused(folders.len(), e))?;
    let file = File::from(fd);
    let path = dir.join(rel);
    if !file.metadata().map_err(read_err(&path))?.is_file() {
        return Err(mismatch(&path, "is not a regular file"));
    }
    Ok(file)
}

/// Walks the record `split` of the layer folder `dir`, checking every file it names, and
/// hands each piece to `sink`; returns the layer tar's size.
fn replay(
    split: &Path,
    dir: &Path,
    sink: &mut dyn FnMut(Piece<'_>) -> Result<(), LayerStoreError>,
) -> Result<u64, LayerStoreError> {
    let file = File::open(split).map_err(read_err(split))?;
    let lines = BufReader::new(flate2::read::GzDecoder::new(file));
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut total = 0u64;
    for line in lines.split(b'\n') {
        let line = line.map_err(read_err(split))?;
        if line.is_empty() {
            continue;
        }
        let entry: SplitEntry = serde_json::from_slice(&line)
            .map_err(|e| mismatch(split, format!("unreadable record: {e}")))?;
        match entry.kind {
            2 => {
                let raw = b64
                    .decode(entry.payload.unwrap_or_default())
                    .map_err(|e| mismatch(split, format!("unreadable segment: {e}")))?;
                total += raw.len() as u64;
                sink(Piece::Raw(raw))?;
            }
            1 if entry.size > 0 => {
                let name: Vec<u8> = match (entry.name, entry.name_raw) {
                    (Some(n), _) => n.into_bytes(),
                    (None, Some(raw)) => b64
                        .decode(raw)
                        .map_err(|e| mismatch(split, format!("unreadable name: {e}")))?,
                    (None, None) => return Err(mismatch(split, "a file without a name")),
                };
                let rel = Path::new(OsStr::from_bytes(&name));
                if !rel
                    .components()
                    .all(|c| matches!(c, Component::Normal(_) | Component::CurDir))
                {
                    return Err(mismatch(
                        split,
                        format!("names {} outside its layer", rel.display()),
                    ));
                }
                let path = dir.join(rel);
                let file = open_beneath(dir, rel)?;
                if file.metadata().map_err(read_err(&path))?.len() != entry.size {
                    return Err(mismatch(
                        &path,
                        format!("is not the {}-byte file the layer recorded", entry.size),
                    ));
                }
                total += entry.size;
                sink(Piece::File {
                    path: &path,
                    file,
                    size: entry.size,
                })?;
            }
            _ => {}
        }
    }
    Ok(total)
}

enum Entry {
    Small {
        name: String,
        data: Vec<u8>,
    },
    Layer {
        name: String,
        split: PathBuf,
        dir: PathBuf,
        size: u64,
    },
}

/// A checked archive, read when streamed.
pub struct Archive {
    entries: Vec<Entry>,
}

impl Archive {
    /// The archive's bytes (headers and padding included).
    pub fn bytes(&self) -> u64 {
        let data: u64 = self
            .entries
            .iter()
            .map(|e| {
                let n = match e {
                    Entry::Small { data, .. } => data.len() as u64,
                    Entry::Layer { size, .. } => *size,
                };
                BLOCK + n.div_ceil(BLOCK) * BLOCK
            })
            .sum();
        data + 2 * BLOCK
    }

    /// Streams the archive, read on a blocking thread, in 1 MiB chunks. A file that changed
    /// since the check ends the stream with an error.
    pub fn stream(self) -> impl Stream<Item = Result<Bytes, RuntimeError>> + Send + 'static {
        let (tx, rx) = mpsc::channel(DEPTH);
        tokio::task::spawn_blocking(move || {
            let mut out = Out {
                buf: BytesMut::with_capacity(CHUNK),
                tx,
            };
            if let Err(e) = self.write(&mut out) {
                let _ = out.tx.blocking_send(Err(RuntimeError::Other(format!(
                    "reading the image from the layer store: {e}"
                ))));
            }
        });
        futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|c| (c, rx)) })
    }

    fn write(&self, out: &mut Out) -> Result<(), LayerStoreError> {
        for e in &self.entries {
            match e {
                Entry::Small { name, data } => {
                    out.put(&header(name, data.len() as u64)?)?;
                    out.put(data)?;
                    out.put(&padding(data.len() as u64))?;
                }
                Entry::Layer {
                    name,
                    split,
                    dir,
                    size,
                } => {
                    out.put(&header(name, *size)?)?;
                    let mut read = vec![0u8; CHUNK];
                    let sent = replay(split, dir, &mut |piece| match piece {
                        Piece::Raw(raw) => out.put(&raw),
                        Piece::File {
                            path,
                            file: mut f,
                            size,
                        } => {
                            let mut left = size;
                            while left > 0 {
                                let want = left.min(CHUNK as u64) as usize;
                                let n = f.read(&mut read[..want]).map_err(read_err(path))?;
                                if n == 0 {
                                    return Err(mismatch(path, "shrank while it was read"));
                                }
                                out.put(&read[..n])?;
                                left -= n as u64;
                            }
                            Ok(())
                        }
                    })?;
                    if sent != *size {
                        return Err(mismatch(split, "changed while it was read"));
                    }
                    out.put(&padding(*size))?;
                }
            }
        }
        out.put(&[0u8; 2 * BLOCK as usize])?;
        out.flush()
    }
}

/// The reading thread's side of the stream.
struct Out {
    buf: BytesMut,
    tx: mpsc::Sender<Result<Bytes, RuntimeError>>,
}

impl Out {
    fn put(&mut self, mut bytes: &[u8]) -> Result<(), LayerStoreError> {
        while !bytes.is_empty() {
            let n = (CHUNK - self.buf.len()).min(bytes.len());
            self.buf.extend_from_slice(&bytes[..n]);
            bytes = &bytes[n..];
            if self.buf.len() == CHUNK {
                self.flush()?;
            }
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<(), LayerStoreError> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let chunk = self.buf.split().freeze();
        self.tx
            .blocking_send(Ok(chunk))
            .map_err(|_| LayerStoreError::Stopped)
    }
}

/// A ustar header for a plain file entry.
fn header(name: &str, size: u64) -> Result<[u8; 512], LayerStoreError> {
    let mut h = tar::Header::new_ustar();
    h.set_path(name)
        .map_err(|e| mismatch(Path::new(name), e.to_string()))?;
    h.set_size(size);
    h.set_mode(0o644);
    h.set_mtime(0);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_cksum();
    let mut block = [0u8; 512];
    block.copy_from_slice(h.as_bytes());
    Ok(block)
}

fn padding(size: u64) -> Vec<u8> {
    vec![0u8; ((BLOCK - size % BLOCK) % BLOCK) as usize]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tagless_name_loads_as_latest_and_ids_or_digests_are_not_tags() {
        assert_eq!(repo_tag("vllm").as_deref(), Some("vllm:latest"));
        assert_eq!(
            repo_tag("reg:5000/vllm").as_deref(),
            Some("reg:5000/vllm:latest")
        );
        assert_eq!(
            repo_tag("reg:5000/vllm:v1").as_deref(),
            Some("reg:5000/vllm:v1")
        );
        assert_eq!(repo_tag("vllm@sha256:abc"), None);
        assert_eq!(repo_tag("sha256:abc"), None);
        assert_eq!(repo_tag("5f1fc34e7a88"), None);
        assert_eq!(repo_tag(""), None);
    }

    /// A layer folder holding `x/a`, and the tar-split record of a tar of it written by the
    /// `tar` crate (one header segment, the file, padding and end-of-archive segment), in
    /// the format moby writes (`{"type":2,"payload":…}` / `{"type":1,"name":…,"size":…}`).
    fn layer(name_in_record: &str) -> (tempfile::TempDir, Vec<u8>) {
        use std::io::Write as _;
        let dir = tempfile::tempdir().unwrap();
        let content = b"hello, layer";
        std::fs::create_dir_all(dir.path().join("diff/x")).unwrap();
        std::fs::write(dir.path().join("diff/x/a"), content).unwrap();
        let mut builder = tar::Builder::new(Vec::new());
        let mut h = tar::Header::new_gnu();
        h.set_size(content.len() as u64);
        h.set_mode(0o644);
        builder.append_data(&mut h, "x/a", &content[..]).unwrap();
        let tar = builder.into_inner().unwrap();
        let b64 = base64::engine::general_purpose::STANDARD;
        let lines = [
            serde_json::json!({"type": 2, "payload": b64.encode(&tar[..512]), "position": 0}),
            serde_json::json!({"type": 1, "name": name_in_record, "size": content.len(), "payload": "AAAAAAAAAAA=", "position": 1}),
            serde_json::json!({"type": 2, "payload": b64.encode(&tar[512 + content.len()..]), "position": 2}),
        ];
        let mut gz = flate2::write::GzEncoder::new(
            File::create(dir.path().join("tar-split.json.gz")).unwrap(),
            flate2::Compression::default(),
        );
        for l in lines {
            writeln!(gz, "{l}").unwrap();
        }
        gz.finish().unwrap();
        (dir, tar)
    }

    fn replayed(dir: &Path) -> Result<Vec<u8>, LayerStoreError> {
        let mut out = Vec::new();
        let size = replay(
            &dir.join("tar-split.json.gz"),
            &dir.join("diff"),
            &mut |piece| {
                match piece {
                    Piece::Raw(raw) => out.extend_from_slice(&raw),
                    Piece::File { mut file, .. } => {
                        file.read_to_end(&mut out).unwrap();
                    }
                }
                Ok(())
            },
        )?;
        assert_eq!(size, out.len() as u64);
        Ok(out)
    }

    #[test]
    fn a_tar_split_record_and_the_layer_folder_give_back_the_tar_bit_for_bit() {
        let (dir, tar) = layer("x/a");
        assert_eq!(replayed(dir.path()).unwrap(), tar);
    }

    #[test]
    fn a_record_naming_a_file_outside_its_layer_or_of_another_size_is_refused() {
        let (dir, _) = layer("../diff/x/a");
        assert!(matches!(
            replayed(dir.path()),
            Err(LayerStoreError::Mismatch { .. })
        ));
        let (dir, _) = layer("x/a");
        std::fs::write(dir.path().join("diff/x/a"), b"changed").unwrap();
        let err = replayed(dir.path()).unwrap_err().to_string();
        assert!(err.contains("is not the 12-byte file"), "{err}");
    }

    /// Replaces the layer folder's `x` with `x -> <a folder outside the layer>` holding a file
    /// `a` of the recorded size (a layer may carry such a link): what reading `x/a` naively
    /// would stream instead of the layer's file.
    fn plant_outside_link(layer: &Path) -> tempfile::TempDir {
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("a"), b"host secret!").unwrap();
        std::fs::remove_dir_all(layer.join("diff/x")).unwrap();
        std::os::unix::fs::symlink(outside.path(), layer.join("diff/x")).unwrap();
        outside
    }

    #[test]
    fn a_record_naming_a_file_through_a_link_in_its_layer_is_refused_without_reading_it() {
        let (dir, _) = layer("x/a");
        let _outside = plant_outside_link(dir.path());
        let err = replayed(dir.path()).unwrap_err();
        assert!(matches!(err, LayerStoreError::Mismatch { .. }), "{err}");
        let text = err.to_string();
        assert!(text.contains("diff/x: is a link"), "{text}");
        // The last part a link too: refused the same way.
        let (dir, _) = layer("x/a");
        let outside = tempfile::tempdir().unwrap();
        std::fs::write(outside.path().join("a"), b"host secret!").unwrap();
        std::fs::remove_file(dir.path().join("diff/x/a")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("a"), dir.path().join("diff/x/a")).unwrap();
        let text = replayed(dir.path()).unwrap_err().to_string();
        assert!(text.contains("diff/x/a: is a link"), "{text}");
    }

    /// A classic store under a temporary root holding one image of the one layer `layer()`
    /// makes (its record naming `x/a`); returns the root, the image and the layer folder.
    fn store() -> (tempfile::TempDir, ImageFacts, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let (dir, tar) = layer("x/a");
        let diff_id = format!("sha256:{}", sha256_hex(&tar));
        let config = serde_json::json!({"rootfs": {"type": "layers", "diff_ids": [diff_id]}});
        let config = config.to_string().into_bytes();
        let content = root.path().join("image/overlay2/imagedb/content/sha256");
        std::fs::create_dir_all(&content).unwrap();
        std::fs::write(content.join(sha256_hex(&config)), &config).unwrap();
        let chain = chain_ids(std::slice::from_ref(&diff_id));
        let record = root
            .path()
            .join("image/overlay2/layerdb/sha256")
            .join(sha256_hex_of(&chain[0]).unwrap());
        std::fs::create_dir_all(&record).unwrap();
        std::fs::write(record.join("diff"), &diff_id).unwrap();
        std::fs::write(record.join("cache-id"), "c0ffee").unwrap();
        std::fs::rename(
            dir.path().join("tar-split.json.gz"),
            record.join("tar-split.json.gz"),
        )
        .unwrap();
        let layer = root.path().join("overlay2/c0ffee");
        std::fs::create_dir_all(&layer).unwrap();
        std::fs::rename(dir.path().join("diff"), layer.join("diff")).unwrap();
        let image = ImageFacts {
            reference: "sl-test:v1".into(),
            id: format!("sha256:{}", sha256_hex(&config)),
            content: String::new(),
            arch: "arm64".into(),
            os: "linux".into(),
            size: tar.len() as u64,
            layers: vec![diff_id],
        };
        (root, image, layer)
    }

    #[test]
    fn a_layer_that_reaches_outside_through_a_link_is_not_read_so_the_push_exports_instead() {
        // `images::read_source` exports through the engine whenever `archive` errs: the
        // refusal has to come here, before the first byte, not from the receiving engine.
        let (root, image, layer) = store();
        let mut features = crate::runtime::features::sample(&[], &[]);
        features.root_dir = root.path().display().to_string();
        let store = LayerStore::of(&features).unwrap();
        let wanted = BTreeSet::from([0]);
        let archive = store.archive(&image, &wanted).unwrap();
        assert!(archive.bytes() > 0);
        let _outside = plant_outside_link(&layer);
        let err = store.archive(&image, &wanted).err().unwrap().to_string();
        assert!(err.contains("overlay2/c0ffee/diff/x: is a link"), "{err}");
    }

    #[test]
    fn only_drivers_with_layer_folders_have_a_store() {
        let mut f = crate::runtime::features::sample(&[], &[]);
        assert!(LayerStore::of(&f).is_ok());
        f.storage_driver = "vfs".into();
        assert!(matches!(
            LayerStore::of(&f),
            Err(LayerStoreError::Driver(_))
        ));
    }
}
