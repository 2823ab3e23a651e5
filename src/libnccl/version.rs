//! NCCL versions: the release number (`2.30.7`), the build string a `libnccl.so` carries inside
//! it (`NCCL version 2.30.7+cuda13.3`, what NCCL prints at init), a streaming scanner that finds
//! that string in a library's bytes without holding the file, and the version a git ref of
//! NCCL names (`v2.30.7-1`).
//!
//! The build string is NCCL's own (`VERSION_STRING` in `src/init.cc`), so it tells what the
//! library *is*, unlike a file name (`libnccl.so.2` says nothing) or PyTorch's compile-time
//! `torch.cuda.nccl.version()`. Pure: bytes in, a version out; nothing is ever loaded.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// An NCCL release: `2.30.7`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NcclVersion {
    pub major: u32,
    pub minor: u32,
    pub patch: u32,
}

impl NcclVersion {
    pub const fn new(major: u32, minor: u32, patch: u32) -> Self {
        NcclVersion {
            major,
            minor,
            patch,
        }
    }

    /// The version a git ref of NCCL names: `v2.30.7-1`, `v2.30.7`, `2.30.7-1`; `None` for a
    /// branch or a commit.
    pub fn from_ref(r: &str) -> Option<NcclVersion> {
        let t = r.trim().strip_prefix('v').unwrap_or(r.trim());
        let t = match t.split_once('-') {
            Some((v, build)) if !build.is_empty() && build.chars().all(|c| c.is_ascii_digit()) => v,
            Some(_) => return None,
            None => t,
        };
        t.parse().ok()
    }
}

/// The first release with `NCCL_IB_SUBNET_AWARE_ROUTING` (`src/transport/net_ib/connect.cc`;
/// absent from 2.28.x, 2.29.x and 2.30.3/2.30.4): what a switchless ring with one subnet per
/// cable needs.
pub const RING_MIN: NcclVersion = NcclVersion::new(2, 30, 7);

impl fmt::Display for NcclVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.major, self.minor, self.patch)
    }
}

impl FromStr for NcclVersion {
    type Err = String;
    /// `2.30.7`.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let parts: Vec<&str> = s.trim().split('.').collect();
        let num = |p: &str| {
            (!p.is_empty() && p.len() <= 6 && p.chars().all(|c| c.is_ascii_digit()))
                .then(|| p.parse::<u32>().ok())
                .flatten()
        };
        match parts.as_slice() {
            [a, b, c] => match (num(a), num(b), num(c)) {
                (Some(major), Some(minor), Some(patch)) => Ok(NcclVersion {
                    major,
                    minor,
                    patch,
                }),
                _ => Err(format!("not an NCCL version (MAJOR.MINOR.PATCH): {s:?}")),
            },
            _ => Err(format!("not an NCCL version (MAJOR.MINOR.PATCH): {s:?}")),
        }
    }
}

impl Serialize for NcclVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for NcclVersion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// What a `libnccl.so` says it is: `2.30.7+cuda13.3` (release, NCCL's suffix, the CUDA it was
/// built with).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct LibVersion {
    pub version: NcclVersion,
    /// NCCL's `NCCL_SUFFIX` (empty for releases).
    pub suffix: String,
    /// `13.3`: the CUDA version it was built against, when the string says.
    pub cuda: Option<String>,
}

impl fmt::Display for LibVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.version, self.suffix)?;
        if let Some(c) = &self.cuda {
            write!(f, "+cuda{c}")?;
        }
        Ok(())
    }
}

impl Serialize for LibVersion {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for LibVersion {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        parse_build_string(&s)
            .ok_or_else(|| serde::de::Error::custom(format!("not an NCCL build string: {s:?}")))
    }
}

/// What follows `NCCL version ` in the library: `2.30.7+cuda13.3` (the suffix and the CUDA part
/// are optional).
pub fn parse_build_string(s: &str) -> Option<LibVersion> {
    let s = s.trim();
    let (head, cuda) = match s.split_once("+cuda") {
        Some((h, c)) => {
            let ok = !c.is_empty() && c.chars().all(|x| x.is_ascii_digit() || x == '.');
            (h, ok.then(|| c.to_string()))
        }
        None => (s, None),
    };
    // MAJOR.MINOR.PATCH, then NCCL's suffix (letters and digits, e.g. `a0`).
    let mut dots = 0;
    let mut end = 0;
    for (i, c) in head.char_indices() {
        if c.is_ascii_digit() {
            end = i + 1;
        } else if c == '.' && dots < 2 {
            dots += 1;
            end = i + 1;
        } else {
            break;
        }
    }
    let version: NcclVersion = head[..end].parse().ok()?;
    let suffix = &head[end..];
    if !suffix.chars().all(|c| c.is_ascii_alphanumeric()) || suffix.len() > 16 {
        return None;
    }
    Some(LibVersion {
        version,
        suffix: suffix.to_string(),
        cuda,
    })
}

/// The marker NCCL's build string starts with.
const MARKER: &[u8] = b"NCCL version ";
/// How far after the marker the build string may reach.
const TAIL: usize = 48;

/// Finds NCCL's build string in a library fed to it chunk by chunk (a file read from the
/// start, an archive streamed from an engine), so a caller can stop reading as soon as it is
/// found: in NCCL's own builds it sits in `.rodata`, a few MiB into a file of hundreds.
#[derive(Debug, Default)]
pub struct Scanner {
    /// The last bytes of what was fed (a marker may straddle two chunks).
    carry: Vec<u8>,
    /// Bytes fed so far.
    pub fed: u64,
    found: Option<LibVersion>,
}

impl Scanner {
    pub fn new() -> Self {
        Scanner::default()
    }

    /// Feeds the next bytes; the version once it is found (and from then on).
    pub fn feed(&mut self, chunk: &[u8]) -> Option<&LibVersion> {
        if self.found.is_none() {
            self.fed += chunk.len() as u64;
            let mut buf = std::mem::take(&mut self.carry);
            buf.extend_from_slice(chunk);
            let mut from = 0;
            while let Some(at) = find(&buf[from..], MARKER).map(|i| i + from) {
                let start = at + MARKER.len();
                let window = &buf[start..buf.len().min(start + TAIL)];
                match window.iter().position(|b| !is_build_char(*b)) {
                    Some(stop) => {
                        if let Some(v) = std::str::from_utf8(&window[..stop])
                            .ok()
                            .and_then(parse_build_string)
                        {
                            self.found = Some(v);
                            return self.found.as_ref();
                        }
                        from = at + 1;
                    }
                    // The string may go on in the next chunk: keep it whole.
                    None if window.len() < TAIL => {
                        self.carry = buf[at..].to_vec();
                        return None;
                    }
                    None => from = at + 1,
                }
            }
            let keep = buf.len().min(MARKER.len() - 1);
            self.carry = buf[buf.len() - keep..].to_vec();
        }
        self.found.as_ref()
    }

    /// What was found.
    pub fn found(&self) -> Option<&LibVersion> {
        self.found.as_ref()
    }

    /// The end of the file: a build string that ran to its very last byte.
    pub fn finish(&mut self) -> Option<&LibVersion> {
        if self.found.is_none()
            && let Some(rest) = self.carry.strip_prefix(MARKER)
        {
            let stop = rest
                .iter()
                .position(|b| !is_build_char(*b))
                .unwrap_or(rest.len());
            self.found = std::str::from_utf8(&rest[..stop])
                .ok()
                .and_then(parse_build_string);
        }
        self.found.as_ref()
    }
}

fn is_build_char(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'.' || b == b'+'
}

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    let first = needle[0];
    let mut i = 0;
    while i + needle.len() <= hay.len() {
        match hay[i..=hay.len() - needle.len()]
            .iter()
            .position(|b| *b == first)
        {
            Some(p) => {
                i += p;
                if &hay[i..i + needle.len()] == needle {
                    return Some(i);
                }
                i += 1;
            }
            None => return None,
        }
    }
    None
}

/// The build string in a whole buffer.
pub fn scan(bytes: &[u8]) -> Option<LibVersion> {
    let mut s = Scanner::new();
    s.feed(bytes);
    s.finish().cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_order_by_number_not_text() {
        let v = |s: &str| s.parse::<NcclVersion>().unwrap();
        assert!(v("2.28.9") < RING_MIN);
        assert!(v("2.30.4") < RING_MIN);
        assert!(v("2.30.10") > RING_MIN);
        assert!(v("2.31.0") > RING_MIN);
        assert!("2.30".parse::<NcclVersion>().is_err());
        assert!("2.30.x".parse::<NcclVersion>().is_err());
    }

    #[test]
    fn a_git_ref_names_a_version_only_when_it_is_a_release_tag() {
        assert_eq!(
            NcclVersion::from_ref("v2.30.7-1"),
            Some(NcclVersion::new(2, 30, 7))
        );
        assert_eq!(
            NcclVersion::from_ref("v2.28.9"),
            Some(NcclVersion::new(2, 28, 9))
        );
        assert_eq!(NcclVersion::from_ref("master"), None);
        assert_eq!(NcclVersion::from_ref("v2.30.7-rc"), None);
        assert_eq!(NcclVersion::from_ref("3f1b2c4"), None);
    }

    #[test]
    fn the_build_string_gives_release_suffix_and_cuda() {
        let v = parse_build_string("2.30.7+cuda13.3").unwrap();
        assert_eq!(v.version, RING_MIN);
        assert_eq!(v.cuda.as_deref(), Some("13.3"));
        assert_eq!(v.to_string(), "2.30.7+cuda13.3");
        let v = parse_build_string("2.31.0a0+cuda12.9").unwrap();
        assert_eq!(v.suffix, "a0");
        assert_eq!(parse_build_string("2.28.9").unwrap().cuda, None);
        assert_eq!(parse_build_string("%s"), None);
    }

    #[test]
    fn the_scanner_finds_the_string_across_chunk_borders_and_skips_format_strings() {
        let mut lib = vec![0u8; 1000];
        lib.extend_from_slice(b"NCCL version %s\0padding\0");
        lib.extend_from_slice(b"NCCL version 2.30.7+cuda13.3\0%s\0NCCL version 2.30.7\0");
        lib.extend(vec![0u8; 500]);
        for size in [1, 3, 7, 13, 64, 4096] {
            let mut s = Scanner::new();
            let mut found = None;
            for chunk in lib.chunks(size) {
                if let Some(v) = s.feed(chunk) {
                    found = Some(v.clone());
                    break;
                }
            }
            assert_eq!(
                found.map(|v| v.to_string()).as_deref(),
                Some("2.30.7+cuda13.3"),
                "chunks of {size}"
            );
        }
        assert_eq!(scan(b"no version here"), None);
        assert_eq!(
            scan(b"xxNCCL version 2.28.9")
                .map(|v| v.to_string())
                .as_deref(),
            Some("2.28.9")
        );
    }
}
