//! The dynamic section of a shared library, read from its bytes as they stream by: the
//! libraries it needs (`DT_NEEDED`), its `DT_SONAME`, and where it tells the loader to look
//! first (`DT_RPATH`, or `DT_RUNPATH`, which glibc puts after `LD_LIBRARY_PATH`). This is how
//! spark-launch learns, without loading anything, that PyTorch's `libtorch_cuda.so` asks for
//! `libnccl.so.2` through `$ORIGIN/../../nvidia/nccl/lib`.
//!
//! A library is read once from the front and never held whole: the ELF header and program
//! headers come first, the dynamic segment is near the end of the file (after the code), and
//! its string table is wherever the linker (or `patchelf`) put it. The first [`PREFIX_KEEP`]
//! bytes are kept while streaming, which holds the string table of ordinary links; when the
//! strings lie behind the stream and outside that prefix, the reader asks for a second pass
//! ([`Feed::Again`]) and keeps only the strings it now knows it needs.
//!
//! A caller that can read at any offset (a file on this machine, a node's file through its
//! shell) asks [`DynamicReader::wanted`] for the few ranges the reader still needs and hands
//! them in with [`DynamicReader::feed_at`]: a few KiB of a library of a GiB, in a handful of
//! reads.
//!
//! 64-bit little-endian ELF only (arm64 and amd64, what the containers run). Pure: bytes in,
//! facts out; the caller opens the stream.

use serde::{Deserialize, Serialize};

use super::loader::{ElfError, Machine, elf_machine};

/// The front of the file kept while streaming (where `ld` puts `.dynstr`).
pub const PREFIX_KEEP: u64 = 8 << 20;
/// The most of a dynamic segment read: real ones are a few hundred bytes.
const DYNAMIC_MAX: u64 = 1 << 20;
/// The longest string read from the string table (an RPATH of torch's is ~300 bytes).
const STRING_MAX: u64 = 64 << 10;
/// The most program headers read.
const PHNUM_MAX: u64 = 4096;

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const DT_NULL: u64 = 0;
const DT_NEEDED: u64 = 1;
const DT_STRTAB: u64 = 5;
const DT_STRSZ: u64 = 10;
const DT_SONAME: u64 = 14;
const DT_RPATH: u64 = 15;
const DT_RUNPATH: u64 = 29;

/// What a library's dynamic section says.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dynamic {
    /// `DT_NEEDED`, in order.
    pub needed: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub soname: Option<String>,
    /// `DT_RPATH`: searched before `LD_LIBRARY_PATH`, and only when there is no `DT_RUNPATH`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rpath: Option<String>,
    /// `DT_RUNPATH`: searched after `LD_LIBRARY_PATH`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runpath: Option<String>,
}

/// Why a file's dynamic section could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DynamicError {
    #[error(transparent)]
    Elf(#[from] ElfError),
    #[error("a statically linked file (no dynamic segment)")]
    Static,
    #[error("the file ends before its {0}")]
    Truncated(&'static str),
    #[error("a malformed ELF file: {0}")]
    Malformed(String),
}

/// What the reader wants after a chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Feed {
    /// The next bytes.
    More,
    /// Start the stream again from byte 0 (the strings lie behind it); call
    /// [`DynamicReader::again`] first.
    Again,
    Done(Dynamic),
}

/// A range of the file being gathered.
#[derive(Clone, Debug, Default)]
struct Window {
    start: u64,
    want: u64,
    data: Vec<u8>,
    /// A NUL-terminated string: complete at its first NUL.
    cstr: bool,
}

impl Window {
    fn new(start: u64, want: u64, cstr: bool) -> Self {
        Window {
            start,
            want,
            data: Vec::new(),
            cstr,
        }
    }

    fn complete(&self) -> bool {
        self.data.len() as u64 >= self.want || (self.cstr && self.data.contains(&0))
    }

    /// Takes what `bytes` (which start at file offset `at`) hold of the next missing bytes.
    fn take(&mut self, at: u64, bytes: &[u8]) {
        if self.complete() {
            return;
        }
        let next = self.start.saturating_add(self.data.len() as u64);
        let end = at.saturating_add(bytes.len() as u64);
        if next < at || next >= end {
            return;
        }
        let from = (next - at) as usize;
        let upto = self.start.saturating_add(self.want).min(end);
        let to = (upto - at) as usize;
        self.data.extend_from_slice(&bytes[from..to]);
    }

    fn text(&self) -> String {
        let end = self
            .data
            .iter()
            .position(|b| *b == 0)
            .unwrap_or(self.data.len());
        String::from_utf8_lossy(&self.data[..end]).into_owned()
    }
}

/// Where the reader is.
#[derive(Clone, Debug)]
enum Stage {
    Header(Window),
    Phdrs {
        entsize: usize,
        window: Window,
    },
    Dynamic {
        loads: Vec<(u64, u64, u64)>,
        window: Window,
    },
    Strings {
        entries: Vec<u64>,
        windows: Vec<Window>,
    },
    Done(Dynamic),
}

/// The most bytes [`DynamicReader::wanted`] asks for at once for a string (the strings are
/// short; one that runs on is asked for again from where it stopped).
const STRING_READ: u64 = 4096;

impl Stage {
    fn windows_ref(&self) -> &[Window] {
        match self {
            Stage::Header(w)
            | Stage::Phdrs { window: w, .. }
            | Stage::Dynamic { window: w, .. } => std::slice::from_ref(w),
            Stage::Strings { windows, .. } => windows,
            Stage::Done(_) => &[],
        }
    }

    fn windows(&mut self) -> &mut [Window] {
        match self {
            Stage::Header(w)
            | Stage::Phdrs { window: w, .. }
            | Stage::Dynamic { window: w, .. } => std::slice::from_mut(w),
            Stage::Strings { windows, .. } => windows,
            Stage::Done(_) => &mut [],
        }
    }
}

/// The most passes over a file (each stage's bytes could, in a strange layout, lie behind the
/// previous one's).
const PASSES_MAX: u8 = 4;

/// A streaming reader of one file's dynamic section (see the module doc).
#[derive(Clone, Debug)]
pub struct DynamicReader {
    pos: u64,
    prefix: Vec<u8>,
    pass: u8,
    stage: Stage,
    machine: Option<Machine>,
}

impl Default for DynamicReader {
    fn default() -> Self {
        Self::new()
    }
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}
fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn u64_at(b: &[u8], at: usize) -> u64 {
    let mut x = [0u8; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(x)
}

impl DynamicReader {
    pub fn new() -> Self {
        DynamicReader {
            pos: 0,
            prefix: Vec::new(),
            pass: 1,
            stage: Stage::Header(Window::new(0, 64, false)),
            machine: None,
        }
    }

    /// The machine of the file, once its header was read.
    pub fn machine(&self) -> Option<Machine> {
        self.machine
    }

    /// The pass this is (1, or more after [`Feed::Again`]).
    pub fn pass(&self) -> u8 {
        self.pass
    }

    /// Prepares the next pass after [`Feed::Again`]: the caller streams from byte 0 again.
    pub fn again(&mut self) {
        self.pos = 0;
        self.pass += 1;
        self.prefix = Vec::new();
        for w in self.stage.windows() {
            if !w.complete() {
                w.data.clear();
            }
        }
    }

    /// Takes the next bytes of the file.
    pub fn feed(&mut self, chunk: &[u8]) -> Result<Feed, DynamicError> {
        let at = self.pos;
        if at < PREFIX_KEEP {
            let keep = ((PREFIX_KEEP - at) as usize).min(chunk.len());
            self.prefix.extend_from_slice(&chunk[..keep]);
        }
        self.pos += chunk.len() as u64;
        loop {
            for w in self.stage.windows() {
                w.take(0, &self.prefix);
                w.take(at, chunk);
            }
            if !self.advance()? {
                break;
            }
        }
        if let Stage::Done(d) = &self.stage {
            return Ok(Feed::Done(d.clone()));
        }
        let (pos, kept) = (self.pos, self.prefix.len() as u64);
        let missed = self.stage.windows().iter().any(|w| {
            let next = w.start.saturating_add(w.data.len() as u64);
            !w.complete() && next < pos && next >= kept
        });
        if !missed {
            return Ok(Feed::More);
        }
        if self.pass >= PASSES_MAX {
            return Err(DynamicError::Malformed(format!(
                "its headers still point behind the stream after {PASSES_MAX} passes"
            )));
        }
        Ok(Feed::Again)
    }

    /// The ranges of the file the reader still needs, as `(offset, length)`, in file order,
    /// for a caller that reads at any offset instead of streaming; empty once done. A string
    /// is asked for [`STRING_READ`] bytes at a time.
    pub fn wanted(&self) -> Vec<(u64, u64)> {
        let mut out: Vec<(u64, u64)> = self
            .stage
            .windows_ref()
            .iter()
            .filter(|w| !w.complete())
            .map(|w| {
                let have = w.data.len() as u64;
                let left = w.want.saturating_sub(have);
                let len = if w.cstr { left.min(STRING_READ) } else { left };
                (w.start.saturating_add(have), len)
            })
            .collect();
        out.sort_unstable();
        out
    }

    /// Takes `bytes` read at file offset `at` (where [`DynamicReader::wanted`] pointed):
    /// `Done` once the section is read, else `More` (ask `wanted` again). A read that comes
    /// back short because the file ends there is answered by [`DynamicReader::finish`].
    pub fn feed_at(&mut self, at: u64, bytes: &[u8]) -> Result<Feed, DynamicError> {
        loop {
            for w in self.stage.windows() {
                w.take(at, bytes);
            }
            if !self.advance()? {
                break;
            }
        }
        match &self.stage {
            Stage::Done(d) => Ok(Feed::Done(d.clone())),
            _ => Ok(Feed::More),
        }
    }

    /// The end of the stream: done, or what was missing.
    pub fn finish(&mut self) -> Result<Dynamic, DynamicError> {
        match &mut self.stage {
            Stage::Done(d) => Ok(d.clone()),
            Stage::Header(_) => Err(DynamicError::Truncated("ELF header")),
            Stage::Phdrs { .. } => Err(DynamicError::Truncated("program headers")),
            Stage::Dynamic { .. } => Err(DynamicError::Truncated("dynamic segment")),
            Stage::Strings { entries, windows } => {
                if windows.iter().all(|w| !w.data.is_empty()) {
                    // Strings that run to the end of the file: what there is.
                    Ok(strings(entries, windows))
                } else {
                    Err(DynamicError::Truncated("string table"))
                }
            }
        }
    }

    /// Moves on when the current stage has its bytes; whether it moved.
    fn advance(&mut self) -> Result<bool, DynamicError> {
        let next = match &self.stage {
            Stage::Header(w) if w.complete() => {
                let h = &w.data;
                self.machine = Some(elf_machine(h)?);
                let phoff = u64_at(h, 32);
                let entsize = u16_at(h, 54) as usize;
                let phnum = u64::from(u16_at(h, 56));
                if entsize < 56 || phnum == 0 || phnum > PHNUM_MAX {
                    return Err(DynamicError::Malformed(format!(
                        "{phnum} program headers of {entsize} bytes"
                    )));
                }
                Stage::Phdrs {
                    entsize,
                    window: Window::new(phoff, entsize as u64 * phnum, false),
                }
            }
            Stage::Phdrs { entsize, window } if window.complete() => {
                let mut loads = Vec::new();
                let mut dynamic = None;
                for p in window.data.chunks_exact(*entsize) {
                    let (offset, vaddr, filesz) = (u64_at(p, 8), u64_at(p, 16), u64_at(p, 32));
                    match u32_at(p, 0) {
                        PT_LOAD => loads.push((offset, vaddr, filesz)),
                        PT_DYNAMIC => dynamic = Some((offset, filesz)),
                        _ => {}
                    }
                }
                let (offset, size) = dynamic.ok_or(DynamicError::Static)?;
                Stage::Dynamic {
                    loads,
                    window: Window::new(offset, size.min(DYNAMIC_MAX), false),
                }
            }
            Stage::Dynamic { loads, window } if window.complete() => dynamic(loads, &window.data)?,
            Stage::Strings { entries, windows } if windows.iter().all(Window::complete) => {
                Stage::Done(strings(entries, windows))
            }
            _ => return Ok(false),
        };
        self.stage = next;
        Ok(true)
    }
}

/// The dynamic segment's entries: the strings to read next (or nothing to read).
fn dynamic(loads: &[(u64, u64, u64)], data: &[u8]) -> Result<Stage, DynamicError> {
    let mut entries = Vec::new();
    let mut offsets = Vec::new();
    let (mut strtab, mut strsz) = (None, None);
    for e in data.chunks_exact(16) {
        let (tag, val) = (u64_at(e, 0), u64_at(e, 8));
        match tag {
            DT_NULL => break,
            DT_STRTAB => strtab = Some(val),
            DT_STRSZ => strsz = Some(val),
            DT_NEEDED | DT_SONAME | DT_RPATH | DT_RUNPATH => {
                entries.push(tag);
                offsets.push(val);
            }
            _ => {}
        }
    }
    if entries.is_empty() {
        return Ok(Stage::Done(Dynamic::default()));
    }
    let (Some(addr), Some(size)) = (strtab, strsz) else {
        return Err(DynamicError::Malformed(
            "a dynamic segment without a string table".into(),
        ));
    };
    // DT_STRTAB is an address: the loaded segment holding it gives its place in the file.
    let base = loads
        .iter()
        .find(|(_, vaddr, filesz)| addr >= *vaddr && addr - vaddr < *filesz)
        .and_then(|(offset, vaddr, _)| (addr - vaddr).checked_add(*offset))
        .ok_or_else(|| {
            DynamicError::Malformed(format!(
                "the string table at {addr:#x} is in no loaded segment"
            ))
        })?;
    let mut windows = Vec::new();
    for off in offsets {
        if off >= size {
            return Err(DynamicError::Malformed(format!(
                "a string at {off} past the string table's {size} bytes"
            )));
        }
        let start = base.checked_add(off).ok_or_else(|| {
            DynamicError::Malformed(format!("a string at {off} past the end of any file"))
        })?;
        windows.push(Window::new(start, (size - off).min(STRING_MAX), true));
    }
    Ok(Stage::Strings { entries, windows })
}

fn strings(entries: &[u64], windows: &[Window]) -> Dynamic {
    let mut d = Dynamic::default();
    for (tag, w) in entries.iter().zip(windows) {
        let s = w.text();
        match *tag {
            DT_NEEDED => d.needed.push(s),
            DT_SONAME => d.soname = Some(s),
            DT_RPATH => d.rpath = Some(s),
            DT_RUNPATH => d.runpath = Some(s),
            _ => {}
        }
    }
    d
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A minimal amd64 shared object: header, two program headers (one PT_LOAD over the whole
    /// file, PT_DYNAMIC), the dynamic segment at `dynamic_at` and the string table at
    /// `strtab_at`, zero-filled to `len` bytes.
    fn synth(strtab_at: usize, dynamic_at: usize, len: usize) -> Vec<u8> {
        let mut f = vec![0u8; len];
        f[..4].copy_from_slice(b"\x7fELF");
        f[4] = 2;
        f[5] = 1;
        f[18..20].copy_from_slice(&62u16.to_le_bytes());
        f[32..40].copy_from_slice(&64u64.to_le_bytes());
        f[54..56].copy_from_slice(&56u16.to_le_bytes());
        f[56..58].copy_from_slice(&2u16.to_le_bytes());
        let phdr = |f: &mut [u8], at: usize, kind: u32, off: u64, vaddr: u64, size: u64| {
            f[at..at + 4].copy_from_slice(&kind.to_le_bytes());
            f[at + 8..at + 16].copy_from_slice(&off.to_le_bytes());
            f[at + 16..at + 24].copy_from_slice(&vaddr.to_le_bytes());
            f[at + 32..at + 40].copy_from_slice(&size.to_le_bytes());
        };
        // Loaded at 0x400000 more than its file offset, as the RW segment of real libraries.
        phdr(&mut f, 64, PT_LOAD, 0, 0x40_0000, len as u64);
        phdr(&mut f, 120, PT_DYNAMIC, dynamic_at as u64, 0, 7 * 16);
        let strings =
            b"\0libnccl.so.2\0libc.so.6\0libtorch_cuda.so\0$ORIGIN/../../nvidia/nccl/lib:$ORIGIN\0";
        f[strtab_at..strtab_at + strings.len()].copy_from_slice(strings);
        let entries: [(u64, u64); 7] = [
            (DT_NEEDED, 1),
            (DT_NEEDED, 14),
            (DT_SONAME, 24),
            (DT_RPATH, 41),
            (DT_STRTAB, 0x40_0000 + strtab_at as u64),
            (DT_STRSZ, strings.len() as u64),
            (DT_NULL, 0),
        ];
        for (i, (t, v)) in entries.iter().enumerate() {
            let at = dynamic_at + i * 16;
            f[at..at + 8].copy_from_slice(&t.to_le_bytes());
            f[at + 8..at + 16].copy_from_slice(&v.to_le_bytes());
        }
        f
    }

    /// Streams `file` in `chunk`-byte pieces, starting over when asked: the result and the
    /// number of passes.
    fn stream(file: &[u8], chunk: usize) -> (Result<Dynamic, DynamicError>, u8) {
        let mut r = DynamicReader::new();
        'pass: loop {
            for c in file.chunks(chunk) {
                match r.feed(c) {
                    Ok(Feed::More) => {}
                    Ok(Feed::Again) => {
                        r.again();
                        continue 'pass;
                    }
                    Ok(Feed::Done(d)) => return (Ok(d), r.pass()),
                    Err(e) => return (Err(e), r.pass()),
                }
            }
            return (r.finish(), r.pass());
        }
    }

    /// Reads `file` at the offsets the reader asks for, as a caller with random access does:
    /// the result and the bytes read.
    fn random(file: &[u8]) -> (Result<Dynamic, DynamicError>, u64) {
        let mut r = DynamicReader::new();
        let mut read = 0u64;
        loop {
            let wanted = r.wanted();
            let Some(&(at, len)) = wanted.first() else {
                return (r.finish(), read);
            };
            let start = (at as usize).min(file.len());
            let end = (at.saturating_add(len) as usize).min(file.len());
            read += (end - start) as u64;
            if start == end {
                return (r.finish(), read);
            }
            match r.feed_at(at, &file[start..end]) {
                Ok(Feed::Done(d)) => return (Ok(d), read),
                Ok(_) => {}
                Err(e) => return (Err(e), read),
            }
        }
    }

    #[test]
    fn a_reader_with_random_access_reads_only_the_ranges_it_is_asked_for() {
        // Wherever the linker put the strings, a few KiB of a 12 MiB file are read.
        let behind = PREFIX_KEEP as usize + 4096;
        for f in [
            synth(4096, 3 << 20, 4 << 20),
            synth(behind, behind + (1 << 20), behind + (2 << 20)),
        ] {
            let (got, read) = random(&f);
            assert_eq!(got, Ok(want()));
            assert!(read < 6 * STRING_READ + 4096, "read {read} bytes");
        }
        let f = synth(300, 900, 1200);
        assert_eq!(
            random(&f[..500]).0,
            Err(DynamicError::Truncated("dynamic segment"))
        );
    }

    fn want() -> Dynamic {
        Dynamic {
            needed: vec!["libnccl.so.2".into(), "libc.so.6".into()],
            soname: Some("libtorch_cuda.so".into()),
            rpath: Some("$ORIGIN/../../nvidia/nccl/lib:$ORIGIN".into()),
            runpath: None,
        }
    }

    #[test]
    fn strings_before_the_dynamic_segment_are_read_in_one_pass_from_the_kept_front() {
        let f = synth(4096, 3 << 20, 4 << 20);
        for chunk in [7, 4096, 1 << 20, 64 << 20] {
            assert_eq!(stream(&f, chunk), (Ok(want()), 1), "chunk {chunk}");
        }
        // One byte at a time.
        assert_eq!(stream(&synth(300, 900, 1200), 1), (Ok(want()), 1));
    }

    #[test]
    fn strings_after_the_dynamic_segment_are_read_as_they_stream_by() {
        let f = synth(
            PREFIX_KEEP as usize + 4096,
            PREFIX_KEEP as usize,
            (PREFIX_KEEP as usize) + (1 << 20),
        );
        assert_eq!(stream(&f, 65536), (Ok(want()), 1));
    }

    #[test]
    fn strings_behind_the_stream_and_past_the_kept_front_take_a_second_pass() {
        let at = PREFIX_KEEP as usize + 4096;
        let f = synth(at, at + (1 << 20), at + (2 << 20));
        assert_eq!(stream(&f, 65536), (Ok(want()), 2));
    }

    #[test]
    fn static_short_and_foreign_files_are_refused_with_why() {
        let mut f = synth(300, 900, 1200);
        // No PT_DYNAMIC: a static executable.
        f[120..124].copy_from_slice(&0u32.to_le_bytes());
        assert_eq!(stream(&f, 100).0, Err(DynamicError::Static));
        let f = synth(300, 900, 1200);
        assert_eq!(
            stream(&f[..500], 100).0,
            Err(DynamicError::Truncated("dynamic segment"))
        );
        assert_eq!(
            stream(
                b"#!/bin/sh\necho not a library, but long enough to have a header........",
                8
            )
            .0,
            Err(DynamicError::Elf(ElfError::NotElf))
        );
        // Headers that point past the end of any file end as a short file, never a panic.
        let mut far = synth(300, 900, 1200);
        far[32..40].copy_from_slice(&(u64::MAX - 8).to_le_bytes());
        assert_eq!(
            stream(&far, 100).0,
            Err(DynamicError::Truncated("program headers"))
        );
        let mut far = synth(300, 900, 1200);
        far[120 + 8..120 + 16].copy_from_slice(&(u64::MAX - 20).to_le_bytes());
        assert_eq!(
            stream(&far, 100).0,
            Err(DynamicError::Truncated("dynamic segment"))
        );
        let mut big_endian = synth(300, 900, 1200);
        big_endian[5] = 2;
        assert_eq!(
            stream(&big_endian, 100).0,
            Err(DynamicError::Elf(ElfError::NotElf64Le))
        );
    }
}
