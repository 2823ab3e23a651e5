//! Reading files and folders the user points at — saved logs (`-` for stdin), recipes, launch
//! profiles, registry clones and the mods in them: one reader for all of them. Regular files
//! only (a device, FIFO or socket is refused at once by name, never read until memory runs
//! out or forever), each kind with its own cap checked before a byte is read and never read
//! past; text either strictly UTF-8 (a bad byte named by its line) or, for logs, with invalid
//! bytes replaced. A tree (a registry clone) is walked without leaving it: a link that leads
//! out of it is refused by name, a folder is entered once however many links lead to it, and
//! the walk stops at a cap of entries. An effect at the edge: it opens files and decides
//! nothing about their content.

use std::collections::BTreeSet;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The largest log read (a day of `NCCL_DEBUG=INFO` from a few ranks is far less).
pub const MAX_LOG_BYTES: u64 = 256 << 20;

/// The most one kind of file may hold, and what to do about a larger one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InputLimit {
    pub max: u64,
    /// Said after "larger than N bytes".
    pub hint: &'static str,
}

/// A saved log.
pub const LOG: InputLimit = InputLimit {
    max: MAX_LOG_BYTES,
    hint: "give the part of the log that matters (e.g. `tail -n 100000`)",
};

/// A recipe, a launch profile or a registry manifest: YAML of a few KiB; a MiB is far more
/// than any of them and little enough that reading it costs nothing.
pub const YAML: InputLimit = InputLimit {
    max: 1 << 20,
    hint: "recipes, launch profiles and registry manifests are a few KiB of YAML; this is not one",
};

/// The most entries a walk of a tree visits (a recipe registry holds hundreds).
pub const MAX_WALK_ENTRIES: usize = 100_000;

/// A file or folder that cannot be read as asked.
#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("cannot read {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "{path} is not a regular file ({kind} is never read): save what it holds to a file first"
    )]
    NotAFile { path: String, kind: &'static str },
    #[error("{path} is larger than {max} bytes: {hint}")]
    TooLarge {
        path: String,
        max: u64,
        hint: &'static str,
    },
    #[error(
        "{path}:{line}: not UTF-8 text (a byte that is not UTF-8 on this line); save the file as UTF-8"
    )]
    NotUtf8 { path: String, line: usize },
    #[error(
        "{path} links outside {root} (to {target}); nothing outside it is read: replace the link with the file itself"
    )]
    OutsideTree {
        path: String,
        target: String,
        root: String,
    },
    #[error(
        "{root} holds more than {max} files and folders; spark-launch stops reading there: give the folder of one registry clone"
    )]
    TooManyEntries { root: String, max: usize },
}

fn shown(path: &Path) -> String {
    crate::text::printable(&path.display().to_string()).into_owned()
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> InputError + '_ {
    move |source| InputError::Io {
        path: shown(path),
        source,
    }
}

/// What a file that is not a regular file is, for the refusal.
fn kind_of(t: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt as _;
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_dir() {
        "a folder"
    } else {
        "not a regular file"
    }
}

/// The bytes of the regular file at `path` (a link is followed; use [`resolve_inside`] first
/// where a link must not lead out of a tree), at most `limit.max`: the size is checked before
/// anything is read, and the read stops past the cap should the file grow meanwhile. The
/// file is opened without blocking, so a FIFO put in its place between the check and the
/// open cannot hang the read.
pub fn read_bytes(path: &Path, limit: InputLimit) -> Result<Vec<u8>, InputError> {
    use std::os::unix::fs::OpenOptionsExt;
    let name = shown(path);
    let meta = std::fs::metadata(path).map_err(io(path))?;
    if !meta.is_file() {
        return Err(InputError::NotAFile {
            path: name,
            kind: kind_of(meta.file_type()),
        });
    }
    let too_large = || InputError::TooLarge {
        path: shown(path),
        max: limit.max,
        hint: limit.hint,
    };
    if meta.len() > limit.max {
        return Err(too_large());
    }
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(io(path))?;
    let opened = file.metadata().map_err(io(path))?;
    if !opened.is_file() {
        return Err(InputError::NotAFile {
            path: name,
            kind: kind_of(opened.file_type()),
        });
    }
    let mut bytes = Vec::with_capacity(usize::try_from(opened.len()).unwrap_or(0));
    (&mut file)
        .take(limit.max + 1)
        .read_to_end(&mut bytes)
        .map_err(io(path))?;
    if bytes.len() as u64 > limit.max {
        return Err(too_large());
    }
    Ok(bytes)
}

/// The text of the file at `path` (`-`: stdin, also capped), invalid UTF-8 replaced: for logs,
/// where a stray byte must not hide the rest.
pub fn read_text(path: &Path, limit: InputLimit) -> Result<String, InputError> {
    if path.as_os_str() != "-" {
        return read_bytes(path, limit).map(|b| String::from_utf8_lossy(&b).into_owned());
    }
    let mut bytes = Vec::new();
    std::io::stdin()
        .take(limit.max + 1)
        .read_to_end(&mut bytes)
        .map_err(|source| InputError::Io {
            path: "stdin".into(),
            source,
        })?;
    if bytes.len() as u64 > limit.max {
        return Err(InputError::TooLarge {
            path: "stdin".into(),
            max: limit.max,
            hint: limit.hint,
        });
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The text of the file at `path`, which must be UTF-8: a file the user wrote (a recipe, a
/// profile), where a replaced byte would silently change what runs.
pub fn read_utf8(path: &Path, limit: InputLimit) -> Result<String, InputError> {
    let bytes = read_bytes(path, limit)?;
    String::from_utf8(bytes).map_err(|e| {
        let good = e.utf8_error().valid_up_to();
        let line = 1 + e.as_bytes()[..good].iter().filter(|b| **b == b'\n').count();
        InputError::NotUtf8 {
            path: shown(path),
            line,
        }
    })
}

/// `path` with every link resolved, when that lies inside `root` (itself resolved, as
/// [`std::fs::canonicalize`] gives it); a link that leads out is refused naming where it
/// goes.
pub fn resolve_inside(root: &Path, path: &Path) -> Result<PathBuf, InputError> {
    let real = std::fs::canonicalize(path).map_err(io(path))?;
    if real.starts_with(root) {
        Ok(real)
    } else {
        Err(InputError::OutsideTree {
            path: shown(path),
            target: shown(&real),
            root: shown(root),
        })
    }
}

/// What a walk of a tree found.
#[derive(Debug, Default)]
pub struct Walk {
    /// The files wanted, by the path they were found at (links kept as links), sorted. A
    /// wanted file that links out of the tree is among them: reading it through
    /// [`resolve_inside`] refuses it by name.
    pub files: Vec<PathBuf>,
    /// Folders that link outside the tree: not entered.
    pub outside: Vec<InputError>,
}

/// Every file under `start` that `want` takes, `start` inside the tree at `root` (resolved, as
/// [`std::fs::canonicalize`] gives it). Folders `enter` refuses and hidden entries (`.git`) are
/// skipped; a link is followed only while it stays in the tree, and each folder is entered
/// once (two links to `.` add nothing); a FIFO or device is listed like a file, and refused by
/// name when it is read. More than
/// [`MAX_WALK_ENTRIES`] entries is an error.
pub fn walk(
    root: &Path,
    start: &Path,
    enter: impl Fn(&Path) -> bool,
    want: impl Fn(&Path) -> bool,
) -> Result<Walk, InputError> {
    let mut out = Walk::default();
    let first = resolve_inside(root, start)?;
    let mut seen: BTreeSet<PathBuf> = BTreeSet::from([first]);
    let mut stack = vec![start.to_path_buf()];
    let mut entries = 0usize;
    while let Some(dir) = stack.pop() {
        let Ok(list) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in list.flatten() {
            entries += 1;
            if entries > MAX_WALK_ENTRIES {
                return Err(InputError::TooManyEntries {
                    root: shown(root),
                    max: MAX_WALK_ENTRIES,
                });
            }
            let p = e.path();
            let hidden = p
                .file_name()
                .and_then(|n| n.to_str())
                .is_some_and(|n| n.starts_with('.'));
            if hidden {
                continue;
            }
            let Ok(t) = e.file_type() else { continue };
            let real = if t.is_symlink() {
                match resolve_inside(root, &p) {
                    Ok(real) => Some(real),
                    Err(err @ InputError::OutsideTree { .. }) => {
                        if std::fs::metadata(&p).is_ok_and(|m| m.is_dir()) {
                            out.outside.push(err);
                        } else if want(&p) {
                            out.files.push(p);
                        }
                        continue;
                    }
                    // A dangling link: nothing to read.
                    Err(_) => continue,
                }
            } else {
                None
            };
            let is_dir = match &real {
                Some(r) => r.is_dir(),
                None => t.is_dir(),
            };
            if is_dir {
                let key = match real {
                    Some(r) => r,
                    None => std::fs::canonicalize(&p).unwrap_or_else(|_| p.clone()),
                };
                if enter(&p) && seen.insert(key) {
                    stack.push(p);
                }
            } else if want(&p) {
                out.files.push(p);
            }
        }
    }
    out.files.sort();
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_and_fifos_are_refused_at_once_and_big_files_by_their_size() {
        let e = read_text(Path::new("/dev/zero"), LOG).unwrap_err();
        assert!(
            matches!(
                e,
                InputError::NotAFile {
                    kind: "a device",
                    ..
                }
            ),
            "{e}"
        );
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("recipe.yaml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let e = read_utf8(&fifo, YAML).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "{} is not a regular file (a FIFO is never read): save what it holds to a file first",
                fifo.display()
            )
        );
        let big = dir.path().join("big.log");
        std::fs::File::create(&big).unwrap().set_len(2048).unwrap();
        let small = InputLimit {
            max: 1024,
            hint: "smaller",
        };
        assert!(matches!(
            read_text(&big, small),
            Err(InputError::TooLarge { .. })
        ));
        let ok = dir.path().join("ok.log");
        std::fs::write(&ok, b"line\xff\n").unwrap();
        assert_eq!(read_text(&ok, small).unwrap(), "line\u{fffd}\n");
    }

    #[test]
    fn a_file_that_must_be_utf8_names_the_line_of_its_first_bad_byte() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("r.yaml");
        std::fs::write(&p, b"model: m\nname: caf\xe9\n").unwrap();
        let e = read_utf8(&p, YAML).unwrap_err();
        assert!(matches!(e, InputError::NotUtf8 { line: 2, .. }), "{e}");
    }

    #[test]
    fn a_link_out_of_the_tree_is_refused_naming_where_it_goes() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("reg");
        std::fs::create_dir_all(root.join("r")).unwrap();
        std::fs::write(t.path().join("secret"), "s").unwrap();
        std::os::unix::fs::symlink(t.path().join("secret"), root.join("r/key")).unwrap();
        std::fs::write(root.join("r/a.yaml"), "a").unwrap();
        std::os::unix::fs::symlink("a.yaml", root.join("r/b.yaml")).unwrap();
        let root = std::fs::canonicalize(&root).unwrap();
        let e = resolve_inside(&root, &root.join("r/key")).unwrap_err();
        assert!(
            e.to_string().contains(&format!(
                "r/key links outside {} (to {})",
                root.display(),
                std::fs::canonicalize(t.path().join("secret"))
                    .unwrap()
                    .display()
            )),
            "{e}"
        );
        assert_eq!(
            resolve_inside(&root, &root.join("r/b.yaml")).unwrap(),
            root.join("r/a.yaml")
        );
    }

    #[test]
    fn a_walk_enters_each_folder_once_and_never_leaves_the_tree() {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("reg");
        std::fs::create_dir_all(root.join("recipes/q")).unwrap();
        std::fs::write(root.join("recipes/q/r.yaml"), "a").unwrap();
        std::fs::write(root.join("recipes/notes.md"), "a").unwrap();
        // Two links to `.` on every level would make a naive walk exponential.
        for dir in ["recipes", "recipes/q"] {
            std::os::unix::fs::symlink(".", root.join(dir).join("self-a")).unwrap();
            std::os::unix::fs::symlink(".", root.join(dir).join("self-b")).unwrap();
        }
        std::os::unix::fs::symlink("/usr", root.join("recipes/usr")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", root.join("recipes/zero.yaml")).unwrap();
        let fifo = root.join("recipes/fifo.yaml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let root = std::fs::canonicalize(&root).unwrap();
        let started = std::time::Instant::now();
        let w = walk(
            &root,
            &root.join("recipes"),
            |_| true,
            |p| p.extension().is_some_and(|x| x == "yaml"),
        )
        .unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        let files: Vec<String> = w
            .files
            .iter()
            .map(|p| p.strip_prefix(&root).unwrap().display().to_string())
            .collect();
        // The FIFO and the link out are listed, each refused by name when read; /usr is not
        // entered.
        assert_eq!(
            files,
            ["recipes/fifo.yaml", "recipes/q/r.yaml", "recipes/zero.yaml"]
        );
        let outside: Vec<String> = w.outside.iter().map(|e| e.to_string()).collect();
        assert_eq!(outside.len(), 1, "{outside:?}");
        assert!(
            outside[0].contains("recipes/usr links outside"),
            "{outside:?}"
        );
        assert!(matches!(
            read_utf8(&root.join("recipes/fifo.yaml"), YAML),
            Err(InputError::NotAFile { .. })
        ));
        let e = resolve_inside(&root, &root.join("recipes/zero.yaml")).unwrap_err();
        assert!(e.to_string().contains("(to /dev/zero)"), "{e}");
    }
}
