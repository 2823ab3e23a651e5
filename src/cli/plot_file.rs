//! Where `--plot FILE.svg` pictures go. The place is checked before the run that draws the
//! picture (its folder exists and can be written, and nothing is in the way), so a long run
//! never ends on "cannot write"; the picture is then written without following a link and
//! never over a file spark-launch did not draw: every picture carries [`MARK`], and only a
//! file carrying it is replaced. Effects: this one file (and a temporary one beside it).

use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// The mark inside every picture spark-launch writes: a file that carries it is ours to
/// replace (a second run with the same `--plot`), any other file is not.
pub const MARK: &str = "<!-- drawn by spark-launch -->";

/// How much of an existing file is read to find [`MARK`] (it sits right after `<svg …>`).
const HEAD: u64 = 4096;

/// Why a picture cannot go where `--plot` says.
#[derive(Debug, thiserror::Error)]
pub enum PlotFileError {
    #[error(
        "--plot {}: the folder {} does not exist; create it or give another place",
        path.display(),
        folder.display()
    )]
    NoFolder { path: PathBuf, folder: PathBuf },
    #[error("--plot {}: {} is not a folder", path.display(), folder.display())]
    NotAFolder { path: PathBuf, folder: PathBuf },
    #[error("--plot {}: cannot write in {}: {cause}", path.display(), folder.display())]
    Unwritable {
        path: PathBuf,
        folder: PathBuf,
        cause: nix::errno::Errno,
    },
    #[error(
        "--plot {}: it is a symbolic link; spark-launch never writes through a link: give another name",
        path.display()
    )]
    Link { path: PathBuf },
    #[error("--plot {}: it exists and is not a regular file", path.display())]
    NotAFile { path: PathBuf },
    #[error(
        "--plot {}: it exists and is not a picture spark-launch drew; it is left as it is: remove it or give another name",
        path.display()
    )]
    NotOurs { path: PathBuf },
    // The cause is in the text, so it is no `source` (the error chain would print it twice).
    #[error("--plot {}: {cause}", path.display())]
    Io {
        path: PathBuf,
        cause: std::io::Error,
    },
}

/// The folder a path names its file in (`.` for a bare name).
fn folder_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Checks, before any run, that the picture can be written at `path`: its folder exists and
/// is writable, and `path` is free, or a picture spark-launch drew there before.
pub fn check(path: &Path) -> Result<(), PlotFileError> {
    let folder = folder_of(path);
    let fail = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::NotFound => PlotFileError::NoFolder {
            path: path.to_path_buf(),
            folder: folder.clone(),
        },
        _ => PlotFileError::Io {
            path: path.to_path_buf(),
            cause: e,
        },
    };
    let meta = std::fs::metadata(&folder).map_err(fail)?;
    if !meta.is_dir() {
        return Err(PlotFileError::NotAFolder {
            path: path.to_path_buf(),
            folder,
        });
    }
    nix::unistd::access(
        &folder,
        nix::unistd::AccessFlags::W_OK | nix::unistd::AccessFlags::X_OK,
    )
    .map_err(|cause| PlotFileError::Unwritable {
        path: path.to_path_buf(),
        folder: folder.clone(),
        cause,
    })?;
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(PlotFileError::Io {
            path: path.to_path_buf(),
            cause: e,
        }),
        Ok(m) if m.file_type().is_symlink() => Err(PlotFileError::Link {
            path: path.to_path_buf(),
        }),
        Ok(m) if !m.file_type().is_file() => Err(PlotFileError::NotAFile {
            path: path.to_path_buf(),
        }),
        Ok(_) if drawn_by_us(path) => Ok(()),
        Ok(_) => Err(PlotFileError::NotOurs {
            path: path.to_path_buf(),
        }),
    }
}

/// Whether the regular file at `path` carries [`MARK`] near its start (read without
/// following a link, and without waiting on a FIFO put there meanwhile).
fn drawn_by_us(path: &Path) -> bool {
    let Ok(f) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    else {
        return false;
    };
    let mut head = Vec::new();
    if f.take(HEAD).read_to_end(&mut head).is_err() {
        return false;
    }
    String::from_utf8_lossy(&head).contains(MARK)
}

/// The SVG text with [`MARK`] right after its opening `<svg …>` tag.
pub fn marked(svg: &str) -> String {
    match svg
        .find("<svg")
        .and_then(|i| svg[i..].find('>').map(|j| i + j + 1))
    {
        Some(at) => format!("{}\n{MARK}{}", &svg[..at], &svg[at..]),
        None => format!("{MARK}\n{svg}"),
    }
}

/// Writes the picture: checked again, written to a new file beside it and renamed into place
/// (a link put there meanwhile is replaced, never followed), readable by all (a picture holds
/// no secret).
pub fn write(path: &Path, svg: &str) -> Result<(), PlotFileError> {
    check(path)?;
    let io = |cause: std::io::Error| PlotFileError::Io {
        path: path.to_path_buf(),
        cause,
    };
    let mut tmp = tempfile::Builder::new()
        .prefix(".spark-launch-plot")
        .suffix(".svg")
        .tempfile_in(folder_of(path))
        .map_err(io)?;
    tmp.write_all(marked(svg).as_bytes()).map_err(io)?;
    tmp.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o644))
        .map_err(io)?;
    tmp.persist(path).map_err(|e| io(e.error))?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_plot_path_is_refused_before_the_run_when_nothing_could_be_written_there() {
        let tmp = tempfile::tempdir().unwrap();
        let missing = tmp.path().join("no/such/folder/run.svg");
        let e = check(&missing).unwrap_err().to_string();
        assert!(e.contains("does not exist"), "{e}");
        let file = tmp.path().join("file");
        std::fs::write(&file, "x").unwrap();
        let e = check(&file.join("run.svg")).unwrap_err().to_string();
        assert!(e.contains("is not a folder"), "{e}");
        // A link, even to a file of ours, is never written through.
        let ours = tmp.path().join("ours.svg");
        write(&ours, "<svg width=\"1\">\n</svg>\n").unwrap();
        let link = tmp.path().join("link.svg");
        std::os::unix::fs::symlink(&ours, &link).unwrap();
        let e = check(&link).unwrap_err().to_string();
        assert!(e.contains("symbolic link"), "{e}");
        // A file we did not draw stays as it is.
        let theirs = tmp.path().join("theirs.svg");
        std::fs::write(&theirs, "<svg>someone's drawing</svg>").unwrap();
        let e = write(&theirs, "<svg></svg>").unwrap_err().to_string();
        assert!(e.contains("not a picture spark-launch drew"), "{e}");
        assert_eq!(
            std::fs::read_to_string(&theirs).unwrap(),
            "<svg>someone's drawing</svg>"
        );
        let e = check(tmp.path()).unwrap_err().to_string();
        assert!(e.contains("not a regular file"), "{e}");
    }

    #[test]
    fn a_picture_of_ours_is_marked_readable_and_replaced_by_the_next_run() {
        let tmp = tempfile::tempdir().unwrap();
        let p = tmp.path().join("run.svg");
        write(&p, "<svg width=\"2\">\n<rect/>\n</svg>\n").unwrap();
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(
            text.starts_with("<svg width=\"2\">\n<!-- drawn by"),
            "{text}"
        );
        let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        write(&p, "<svg width=\"3\">\n</svg>\n").unwrap();
        assert!(std::fs::read_to_string(&p).unwrap().contains("width=\"3\""));
        // Nothing else left in the folder.
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 1);
    }
}
