//! Which layers of an image each node lacks, and the `docker load` stream (the engine's
//! export, or the archive `runtime::layer_store` reads from the store) cut down, per node, to
//! carry only those: the engine's `docker load` never reads the tar of a layer whose chain
//! it already has, so an archive that keeps every small entry (manifest, config, layer
//! metadata) and drops the big `layer.tar` of every layer a node holds loads the same image.
//!
//! Pure: diff IDs and chain IDs in, decisions out; tar blocks in, per-target slices out (no
//! I/O; the caller streams). Memory is constant: only headers and small metadata entries
//! (at most [`SMALL_ENTRY`] bytes) are held, never layer data.
//!
//! ## Which tar entry is which layer
//!
//! The stream names layers by paths, in the order the engine walks its temporary folder, and
//! `manifest.json` (which maps paths to layers) comes last. So each layer is recognised when its
//! entry begins:
//! - OCI layout (Docker 25+, and `runtime::layer_store`'s archive): `blobs/sha256/<hex>` where
//!   `<hex>` is a diff ID (layer tars are stored uncompressed, so their digest is their diff ID).
//! - Classic layout (Docker ≤ 24): `<v1id>/layer.tar`, where `<v1id>/json` came just before it.
//!   The engine derives the v1 ID from that JSON and the layer's chain ID (`v1.CreateID`: the
//!   JSON's fields without `id`, `parent` as a digest, plus `layer_id`, as canonical JSON), so
//!   trying each chain ID of the image finds the one that reproduces the v1 ID.
//!
//! An entry that is not recognised goes to every target: a wrong guess can only cost bytes,
//! never a layer. The node's own check after the load (`images`) proves the result.

use std::collections::{BTreeMap, BTreeSet};

use bytes::{Bytes, BytesMut};

use crate::digest::{is_hex64, sha256_hex};

/// Metadata entries up to this size are held to be read (layer JSON, PAX records).
pub const SMALL_ENTRY: u64 = 1 << 20;

const BLOCK: usize = 512;

/// The chain ID of every prefix of `diff_ids` (`sha256:` digests, bottom layer first): the
/// first is the first diff ID, each next one `sha256(parent + " " + diff)`.
pub fn chain_ids(diff_ids: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::with_capacity(diff_ids.len());
    for d in diff_ids {
        let next = match out.last() {
            None => d.clone(),
            Some(parent) => format!("sha256:{}", sha256_hex(format!("{parent} {d}"))),
        };
        out.push(next);
    }
    out
}

/// Indices of the layers of `diff_ids` that a node holding the chains `have` lacks: every
/// layer from the first whose chain is absent (a layer exists only on top of its parents).
pub fn missing_layers(diff_ids: &[String], have: &BTreeSet<String>) -> Vec<usize> {
    let chains = chain_ids(diff_ids);
    match chains.iter().position(|c| !have.contains(c)) {
        Some(first) => (first..diff_ids.len()).collect(),
        None => Vec::new(),
    }
}

/// The v1 ID the engine gives layer `chain` of an image, computed from the layer's `json`
/// entry as the engine wrote it. `None` when the JSON is not an object.
fn v1_id_for(json: &str, chain: &str, drop_os: bool) -> Option<String> {
    let fields: BTreeMap<String, Box<serde_json::value::RawValue>> =
        serde_json::from_str(json).ok()?;
    let mut parts: BTreeMap<String, String> = BTreeMap::new();
    for (k, v) in fields {
        match k.as_str() {
            "id" => {}
            "os" if drop_os => {}
            "parent" => {
                let p: String = serde_json::from_str(v.get()).ok()?;
                parts.insert(k, serde_json::to_string(&format!("sha256:{p}")).ok()?);
            }
            _ => {
                parts.insert(k, v.get().to_string());
            }
        }
    }
    parts.insert("layer_id".into(), serde_json::to_string(chain).ok()?);
    let body: Vec<String> = parts
        .iter()
        .map(|(k, v)| format!("{}:{v}", serde_json::to_string(k).unwrap_or_default()))
        .collect();
    Some(sha256_hex(format!("{{{}}}", body.join(","))))
}

/// Which layer (index into the image's diff IDs) a classic-layout layer folder holds, from its
/// `json` entry: the chain ID that reproduces the folder's v1 ID.
pub fn classic_layer_index(v1_id: &str, json: &str, chains: &[String]) -> Option<usize> {
    // The engine sets `os` on lower layers after computing their ID, on the top one before.
    for drop_os in [false, true] {
        for (i, c) in chains.iter().enumerate() {
            if v1_id_for(json, c, drop_os).as_deref() == Some(v1_id) {
                return Some(i);
            }
        }
    }
    None
}

/// One piece of the output and the targets it goes to (`to[t]`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Piece {
    pub bytes: Bytes,
    pub to: Vec<bool>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum State {
    /// Collecting a 512-byte header block.
    Header,
    /// Collecting the data of a small entry (held whole, sent on completion).
    Small { left: u64, kind: SmallKind },
    /// Passing the data of a big entry (plus padding) through to `to`.
    Data { left: u64, to: Vec<bool> },
    /// After the end-of-archive blocks: everything else passes to all.
    Trailer,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum SmallKind {
    /// A PAX or GNU long-name header: its name applies to the next entry.
    Extension { pax: bool },
    /// An ordinary small file; a classic layer's `json` is read.
    File { name: String },
}

/// Cuts a `docker load` stream per target: layers a target lacks (or that are not recognised)
/// go to it, the others do not; every other entry goes to every target.
pub struct LayerFilter {
    chains: Vec<String>,
    diff_ids: Vec<String>,
    /// `missing[t]`: the layer indices target `t` lacks.
    missing: Vec<BTreeSet<usize>>,
    state: State,
    /// A partial header, or a small entry's data (header first).
    held: BytesMut,
    /// Extension headers (PAX, GNU long name) waiting for the entry they describe.
    pending: BytesMut,
    pending_name: Option<String>,
    /// Classic layout: layer folder (v1 ID) → layer index, learnt from `json` entries.
    folders: BTreeMap<String, usize>,
    /// Layer indices found in the stream so far.
    pub recognised: BTreeSet<usize>,
    zero_blocks: u8,
}

impl LayerFilter {
    /// `diff_ids`: the image's layers, bottom first; `missing[t]`: what target `t` lacks.
    pub fn new(diff_ids: Vec<String>, missing: Vec<BTreeSet<usize>>) -> Self {
        LayerFilter {
            chains: chain_ids(&diff_ids),
            diff_ids,
            missing,
            state: State::Header,
            held: BytesMut::new(),
            pending: BytesMut::new(),
            pending_name: None,
            folders: BTreeMap::new(),
            recognised: BTreeSet::new(),
            zero_blocks: 0,
        }
    }

    fn all(&self) -> Vec<bool> {
        vec![true; self.missing.len()]
    }

    /// Feeds the next bytes of the stream; returns what goes where, in order.
    pub fn push(&mut self, mut input: Bytes) -> Vec<Piece> {
        let mut out = Vec::new();
        while !input.is_empty() {
            match self.state.clone() {
                State::Trailer => {
                    out.push(Piece {
                        bytes: input.split_to(input.len()),
                        to: self.all(),
                    });
                }
                State::Data { left, to } => {
                    let n = (left.min(input.len() as u64)) as usize;
                    let bytes = input.split_to(n);
                    if to.iter().any(|t| *t) {
                        out.push(Piece {
                            bytes,
                            to: to.clone(),
                        });
                    }
                    let left = left - n as u64;
                    self.state = if left == 0 {
                        State::Header
                    } else {
                        State::Data { left, to }
                    };
                }
                State::Small { left, kind } => {
                    let n = (left.min(input.len() as u64)) as usize;
                    self.held.extend_from_slice(&input.split_to(n));
                    let left = left - n as u64;
                    if left > 0 {
                        self.state = State::Small { left, kind };
                    } else {
                        self.state = State::Header;
                        self.small_done(kind, &mut out);
                    }
                }
                State::Header => {
                    let need = BLOCK - self.held.len();
                    let n = need.min(input.len());
                    self.held.extend_from_slice(&input.split_to(n));
                    if self.held.len() == BLOCK {
                        let block = self.held.split().freeze();
                        self.header(block, &mut out);
                    }
                }
            }
        }
        out
    }

    /// A complete header block.
    fn header(&mut self, block: Bytes, out: &mut Vec<Piece>) {
        if block.iter().all(|b| *b == 0) {
            self.zero_blocks += 1;
            self.flush_pending(out);
            out.push(Piece {
                bytes: block,
                to: self.all(),
            });
            if self.zero_blocks >= 2 {
                self.state = State::Trailer;
            }
            return;
        }
        self.zero_blocks = 0;
        let kind = block[156];
        let Some(size) = parse_size(&block[124..136]) else {
            // Unreadable size: nothing more can be recognised; pass the rest to everyone.
            self.flush_pending(out);
            out.push(Piece {
                bytes: block,
                to: self.all(),
            });
            self.state = State::Trailer;
            return;
        };
        let padded = size.div_ceil(BLOCK as u64) * BLOCK as u64;
        match kind {
            b'x' | b'L' if padded <= SMALL_ENTRY => {
                self.held.extend_from_slice(&block);
                self.state = State::Small {
                    left: padded,
                    kind: SmallKind::Extension { pax: kind == b'x' },
                };
                if padded == 0 {
                    self.state = State::Header;
                    self.small_done(SmallKind::Extension { pax: kind == b'x' }, out);
                }
            }
            _ => {
                let name = self
                    .pending_name
                    .take()
                    .unwrap_or_else(|| header_name(&block));
                let to = self.targets_for(&name);
                let small = kind != b'x' && kind != b'L' && padded <= SMALL_ENTRY;
                if small && to.iter().all(|t| *t) {
                    self.held.extend_from_slice(&block);
                    self.state = State::Small {
                        left: padded,
                        kind: SmallKind::File { name },
                    };
                    if padded == 0 {
                        self.state = State::Header;
                        self.small_done(
                            SmallKind::File {
                                name: String::new(),
                            },
                            out,
                        );
                    }
                    return;
                }
                let pending = self.pending.split().freeze();
                if to.iter().any(|t| *t) {
                    if !pending.is_empty() {
                        out.push(Piece {
                            bytes: pending,
                            to: to.clone(),
                        });
                    }
                    out.push(Piece {
                        bytes: block,
                        to: to.clone(),
                    });
                }
                self.state = if padded == 0 {
                    State::Header
                } else {
                    State::Data { left: padded, to }
                };
            }
        }
    }

    /// A small entry (header + padded data) is complete in `held`.
    fn small_done(&mut self, kind: SmallKind, out: &mut Vec<Piece>) {
        let entry = self.held.split().freeze();
        match kind {
            SmallKind::Extension { pax } => {
                let size = parse_size(&entry[124..136]).unwrap_or(0) as usize;
                let data = &entry[BLOCK..(BLOCK + size).min(entry.len())];
                let name = if pax {
                    pax_path(data)
                } else {
                    Some(
                        String::from_utf8_lossy(data)
                            .trim_end_matches('\0')
                            .to_string(),
                    )
                };
                if let Some(n) = name {
                    self.pending_name = Some(n);
                }
                self.pending.extend_from_slice(&entry);
            }
            SmallKind::File { name } => {
                if let Some(folder) = name.strip_suffix("/json")
                    && is_hex64(folder)
                    && entry.len() > BLOCK
                {
                    let size = parse_size(&entry[124..136]).unwrap_or(0) as usize;
                    let data = &entry[BLOCK..(BLOCK + size).min(entry.len())];
                    if let Ok(json) = std::str::from_utf8(data)
                        && let Some(i) = classic_layer_index(folder, json, &self.chains)
                    {
                        self.folders.insert(folder.to_string(), i);
                    }
                }
                self.flush_pending(out);
                out.push(Piece {
                    bytes: entry,
                    to: self.all(),
                });
            }
        }
    }

    fn flush_pending(&mut self, out: &mut Vec<Piece>) {
        if !self.pending.is_empty() {
            out.push(Piece {
                bytes: self.pending.split().freeze(),
                to: self.all(),
            });
        }
        self.pending_name = None;
    }

    /// The targets an entry named `name` goes to.
    fn targets_for(&mut self, name: &str) -> Vec<bool> {
        let name = name.trim_start_matches("./");
        let layer = if let Some(folder) = name.strip_suffix("/layer.tar") {
            self.folders.get(folder).copied()
        } else if let Some(h) = name.strip_prefix("blobs/sha256/") {
            let d = format!("sha256:{h}");
            self.diff_ids.iter().position(|x| *x == d)
        } else {
            None
        };
        match layer {
            Some(i) => {
                self.recognised.insert(i);
                self.missing.iter().map(|m| m.contains(&i)).collect()
            }
            None => self.all(),
        }
    }
}

/// The name of a ustar (or v7) header: `prefix/name`.
fn header_name(block: &[u8]) -> String {
    let field = |r: std::ops::Range<usize>| {
        let raw = &block[r];
        let end = raw.iter().position(|b| *b == 0).unwrap_or(raw.len());
        String::from_utf8_lossy(&raw[..end]).into_owned()
    };
    let name = field(0..100);
    if &block[257..262] == b"ustar" {
        let prefix = field(345..500);
        if !prefix.is_empty() {
            return format!("{prefix}/{name}");
        }
    }
    name
}

/// A size field: octal text, or base-256 when the high bit is set.
fn parse_size(field: &[u8]) -> Option<u64> {
    if field.first().is_some_and(|b| b & 0x80 != 0) {
        let mut v: u64 = u64::from(field[0] & 0x7f);
        for b in &field[1..] {
            v = v.checked_mul(256)?.checked_add(u64::from(*b))?;
        }
        return Some(v);
    }
    let text: String = field
        .iter()
        .take_while(|b| **b != 0)
        .map(|b| *b as char)
        .collect();
    let text = text.trim();
    if text.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(text, 8).ok()
}

/// The `path` record of PAX extended header data (`"<len> path=<value>\n"` records).
fn pax_path(data: &[u8]) -> Option<String> {
    let mut rest = data;
    let mut found = None;
    while !rest.is_empty() {
        let sp = rest.iter().position(|b| *b == b' ')?;
        let len: usize = std::str::from_utf8(&rest[..sp]).ok()?.parse().ok()?;
        if len == 0 || len > rest.len() {
            return found;
        }
        let record = &rest[sp + 1..len];
        let record = record.strip_suffix(b"\n").unwrap_or(record);
        if let Some(v) = record.strip_prefix(b"path=") {
            found = Some(String::from_utf8_lossy(v).into_owned());
        }
        rest = &rest[len..];
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    // Captured from this machine's Docker Engine 20.10.24: `docker save` of a three-layer
    // image (busybox import, COPY, RUN), its `docker inspect` RootFS.Layers and the v1 folder
    // names and `json` entries of the archive.
    const DIFFS: [&str; 3] = [
        "sha256:c9e53e3bac2c15042323e57b0a09d68e81c8ae7f64eccbc2da9f3ebcaa5ddb13",
        "sha256:94702d5fa625de68d4812b09a745746204a64281f226b0d144f72f46c5eee068",
        "sha256:d508668d49d61414603663566c4db6cc5e223aa858d8950d7a679b9c316b0199",
    ];
    const LOWER_ID: &str = "c99ae2b6c425e35215494422bb489790392dfea2932421711e3f2a0044137ff8";
    const LOWER_JSON: &str = r#"{"id":"c99ae2b6c425e35215494422bb489790392dfea2932421711e3f2a0044137ff8","parent":"5b8eea8012f3e684f9e5141df923f95f0fe83e64c7717aaa5c3d729ea11bd3e5","created":"1970-01-01T00:00:00Z","container_config":{"Hostname":"","Domainname":"","User":"","AttachStdin":false,"AttachStdout":false,"AttachStderr":false,"Tty":false,"OpenStdin":false,"StdinOnce":false,"Env":null,"Cmd":null,"Image":"","Volumes":null,"WorkingDir":"","Entrypoint":null,"OnBuild":null,"Labels":null},"os":"linux"}"#;
    const BOTTOM_ID: &str = "5b8eea8012f3e684f9e5141df923f95f0fe83e64c7717aaa5c3d729ea11bd3e5";
    const BOTTOM_JSON: &str = r#"{"id":"5b8eea8012f3e684f9e5141df923f95f0fe83e64c7717aaa5c3d729ea11bd3e5","created":"1970-01-01T00:00:00Z","container_config":{"Hostname":"","Domainname":"","User":"","AttachStdin":false,"AttachStdout":false,"AttachStderr":false,"Tty":false,"OpenStdin":false,"StdinOnce":false,"Env":null,"Cmd":null,"Image":"","Volumes":null,"WorkingDir":"","Entrypoint":null,"OnBuild":null,"Labels":null},"os":"linux"}"#;

    fn diffs() -> Vec<String> {
        DIFFS.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn chain_ids_follow_the_engines_rule() {
        let c = chain_ids(&diffs());
        assert_eq!(c[0], DIFFS[0]);
        assert_eq!(c.len(), 3);
        assert_ne!(c[1], DIFFS[1]);
    }

    #[test]
    fn a_node_lacks_every_layer_above_the_first_chain_it_does_not_have() {
        let c = chain_ids(&diffs());
        let have: BTreeSet<String> = c[..2].iter().cloned().collect();
        assert_eq!(missing_layers(&diffs(), &have), vec![2]);
        assert_eq!(missing_layers(&diffs(), &BTreeSet::new()), vec![0, 1, 2]);
        let all: BTreeSet<String> = c.iter().cloned().collect();
        assert!(missing_layers(&diffs(), &all).is_empty());
        // The same top diff on another base is another chain: still missing.
        let other: BTreeSet<String> = [DIFFS[2].to_string()].into_iter().collect();
        assert_eq!(missing_layers(&diffs(), &other), vec![0, 1, 2]);
    }

    #[test]
    fn classic_layer_folders_are_recognised_from_their_json_as_the_engine_wrote_it() {
        let c = chain_ids(&diffs());
        assert_eq!(classic_layer_index(BOTTOM_ID, BOTTOM_JSON, &c), Some(0));
        assert_eq!(classic_layer_index(LOWER_ID, LOWER_JSON, &c), Some(1));
        assert_eq!(classic_layer_index(LOWER_ID, BOTTOM_JSON, &c), None);
    }

    fn entry(name: &str, data: &[u8]) -> Vec<u8> {
        let mut h = tar::Header::new_ustar();
        h.set_path(name).unwrap();
        h.set_size(data.len() as u64);
        h.set_mode(0o644);
        h.set_cksum();
        let mut v = h.as_bytes().to_vec();
        v.extend_from_slice(data);
        v.resize(v.len().div_ceil(512) * 512, 0);
        v
    }

    fn run(filter: &mut LayerFilter, archive: &[u8], chunk: usize) -> Vec<Vec<u8>> {
        let mut outs = vec![Vec::new(); 2];
        for part in archive.chunks(chunk) {
            for p in filter.push(Bytes::copy_from_slice(part)) {
                for (t, yes) in p.to.iter().enumerate() {
                    if *yes {
                        outs[t].extend_from_slice(&p.bytes);
                    }
                }
            }
        }
        outs
    }

    fn names(archive: &[u8]) -> Vec<String> {
        let mut a = tar::Archive::new(archive);
        a.entries()
            .unwrap()
            .map(|e| e.unwrap().path().unwrap().display().to_string())
            .collect()
    }

    #[test]
    fn each_target_gets_the_archive_without_the_layer_tars_it_already_has() {
        let big = vec![7u8; 3 * 1024 * 1024 + 5];
        let mut archive = Vec::new();
        archive.extend(entry(&format!("{BOTTOM_ID}/VERSION"), b"1.0"));
        archive.extend(entry(&format!("{BOTTOM_ID}/json"), BOTTOM_JSON.as_bytes()));
        archive.extend(entry(&format!("{BOTTOM_ID}/layer.tar"), &big));
        archive.extend(entry(&format!("{LOWER_ID}/json"), LOWER_JSON.as_bytes()));
        archive.extend(entry(&format!("{LOWER_ID}/layer.tar"), b"lower layer"));
        archive.extend(entry("unknown/layer.tar", b"who knows"));
        archive.extend(entry("manifest.json", b"[]"));
        archive.extend(vec![0u8; 1024]);
        // Target 0 lacks everything, target 1 only the top layer.
        let missing = vec![[0, 1, 2].into_iter().collect(), [2].into_iter().collect()];
        for chunk in [7, 512, 4096, 1 << 20] {
            let mut f = LayerFilter::new(diffs(), missing.clone());
            let outs = run(&mut f, &archive, chunk);
            assert_eq!(outs[0], archive, "chunk {chunk}: a full target gets it all");
            assert_eq!(
                names(&outs[1]),
                vec![
                    format!("{BOTTOM_ID}/VERSION"),
                    format!("{BOTTOM_ID}/json"),
                    format!("{LOWER_ID}/json"),
                    "unknown/layer.tar".to_string(),
                    "manifest.json".to_string()
                ],
                "chunk {chunk}"
            );
            assert!(outs[1].len() < 10_000, "chunk {chunk}: {}", outs[1].len());
            assert_eq!(f.recognised, [0, 1].into_iter().collect());
        }
    }

    #[test]
    fn oci_layout_blobs_are_recognised_by_their_digest_and_long_names_by_pax() {
        let hex0 = DIFFS[0].trim_start_matches("sha256:");
        let mut archive = Vec::new();
        archive.extend(entry(&format!("blobs/sha256/{hex0}"), b"layer zero"));
        // A PAX header naming the next entry (as Go's tar writer does for long names).
        let long = format!("blobs/sha256/{hex0}");
        let rec = format!("path={long}\n");
        let len = rec.len() + 3;
        let pax = format!("{len} {rec}");
        let mut h = tar::Header::new_ustar();
        h.set_path("PaxHeaders/x").unwrap();
        h.set_entry_type(tar::EntryType::XHeader);
        h.set_size(pax.len() as u64);
        h.set_cksum();
        archive.extend_from_slice(h.as_bytes());
        let mut data = pax.into_bytes();
        data.resize(512, 0);
        archive.extend(data);
        archive.extend(entry("short", b"layer zero again"));
        archive.extend(entry("index.json", b"{}"));
        archive.extend(vec![0u8; 1024]);
        let missing = vec![[0, 1, 2].into_iter().collect(), BTreeSet::new()];
        let mut f = LayerFilter::new(diffs(), missing);
        let outs = run(&mut f, &archive, 100);
        assert_eq!(outs[0], archive);
        assert_eq!(names(&outs[1]), vec!["index.json".to_string()]);
    }
}
