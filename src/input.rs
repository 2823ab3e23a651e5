//! Reading files the user points at (saved logs, `-` for stdin): regular files only (`report
//! nccl /dev/zero` or a FIFO is refused at once, never read until the end of time), at most
//! [`MAX_LOG_BYTES`], the text returned with invalid UTF-8 replaced and, for printing, its
//! control characters escaped by `text` where it is shown. An effect at the edge: it opens
//! files and decides nothing about their content.

use std::io::Read;
use std::path::Path;

/// The largest log read (a day of `NCCL_DEBUG=INFO` from a few ranks is far less).
pub const MAX_LOG_BYTES: u64 = 256 << 20;

/// A file that cannot be read as a log.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} is not a regular file (a device, FIFO or socket is not read): save the log to a file first"
    )]
    NotAFile { path: String },
    #[error(
        "{path} is larger than {max} bytes: give the part of the log that matters (e.g. `tail -n 100000`)"
    )]
    TooLarge { path: String, max: u64 },
}

fn shown(path: &Path) -> String {
    crate::text::printable(&path.display().to_string()).into_owned()
}

/// The text of the file at `path` (`-`: stdin, also capped), at most `max` bytes.
pub fn read_text(path: &Path, max: u64) -> Result<String, InputError> {
    use std::os::unix::fs::OpenOptionsExt;
    let name = shown(path);
    let mut bytes = Vec::new();
    if path.as_os_str() == "-" {
        std::io::stdin()
            .take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| InputError::Io {
                path: "stdin".into(),
                source,
            })?;
    } else {
        let meta = std::fs::metadata(path).map_err(|source| InputError::Io {
            path: name.clone(),
            source,
        })?;
        if !meta.is_file() {
            return Err(InputError::NotAFile { path: name });
        }
        if meta.len() > max {
            return Err(InputError::TooLarge { path: name, max });
        }
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK)
            .open(path)
            .map_err(|source| InputError::Io {
                path: name.clone(),
                source,
            })?;
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return Err(InputError::NotAFile { path: name });
        }
        (&mut file)
            .take(max + 1)
            .read_to_end(&mut bytes)
            .map_err(|source| InputError::Io {
                path: name.clone(),
                source,
            })?;
    }
    if bytes.len() as u64 > max {
        return Err(InputError::TooLarge {
            path: if path.as_os_str() == "-" {
                "stdin".into()
            } else {
                name
            },
            max,
        });
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_and_fifos_are_refused_at_once_and_big_files_by_their_size() {
        let e = read_text(Path::new("/dev/zero"), MAX_LOG_BYTES).unwrap_err();
        assert!(matches!(e, InputError::NotAFile { .. }), "{e}");
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.log");
        std::fs::File::create(&big).unwrap().set_len(2048).unwrap();
        assert!(matches!(
            read_text(&big, 1024),
            Err(InputError::TooLarge { .. })
        ));
        let ok = dir.path().join("ok.log");
        std::fs::write(&ok, b"line\xff\n").unwrap();
        assert_eq!(read_text(&ok, 1024).unwrap(), "line\u{fffd}\n");
    }
}
