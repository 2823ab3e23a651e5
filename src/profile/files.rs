//! Where profiles come from: the user's folder (`$XDG_CONFIG_HOME/spark-launch/profiles`, every
//! `*.yaml` in it) and the ones bundled in the binary, found by name or by path. Reads files;
//! parsing and validation are `profile::parse`'s.

use std::path::{Path, PathBuf};

use super::{Loaded, ProfileErrors, ProfileOrigin, SetArg, bundled, catalogue, parse};

/// Why a profile could not be had.
#[derive(Debug, thiserror::Error)]
pub enum FindError {
    #[error("cannot read the profile {path}: {cause}")]
    Read { path: String, cause: String },
    #[error(transparent)]
    Invalid(#[from] ProfileErrors),
    #[error("no launch profile named {name:?}; known: {} (or give a path to a .yaml file)", known.join(", "))]
    Unknown { name: String, known: Vec<String> },
}

/// Reads every `*.yaml` of the user's folder; each invalid file is an error naming it.
pub fn user_profiles(dir: &Path) -> (Vec<Loaded>, Vec<FindError>) {
    let mut loaded = Vec::new();
    let mut errors = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return (loaded, errors);
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"))
        .collect();
    paths.sort();
    for p in paths {
        match load_file(&p, &[]) {
            Ok(l) => loaded.push(l),
            Err(e) => errors.push(e),
        }
    }
    (loaded, errors)
}

fn load_file(path: &Path, sets: &[SetArg]) -> Result<Loaded, FindError> {
    // The one reader: a FIFO or device is refused at once, a file over the cap unread.
    let text = crate::input::read_utf8(path, crate::input::YAML).map_err(|e| FindError::Read {
        path: path.display().to_string(),
        cause: e.to_string(),
    })?;
    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("");
    let file = path.display().to_string();
    let profile = parse(&file, Some(stem), &text, sets)?;
    Ok(Loaded {
        profile,
        origin: ProfileOrigin::User,
        file,
    })
}

/// Finds a profile by name (the user's folder first, then the bundled ones) or by path, with
/// `--set` changes applied before validation.
pub fn find(name: &str, dir: &Path, sets: &[SetArg]) -> Result<Loaded, FindError> {
    if name.ends_with(".yaml") || name.ends_with(".yml") || name.contains('/') {
        return load_file(Path::new(name), sets);
    }
    for ext in ["yaml", "yml"] {
        let p = dir.join(format!("{name}.{ext}"));
        if p.is_file() {
            return load_file(&p, sets);
        }
    }
    if let Some((file, text)) = bundled::FILES
        .iter()
        .find(|(f, _)| f.trim_end_matches(".yaml") == name)
    {
        let label = format!("launch-profiles/{file}");
        let profile = parse(&label, Some(name), text, sets)?;
        return Ok(Loaded {
            profile,
            origin: ProfileOrigin::Bundled,
            file: label,
        });
    }
    let mut known: Vec<String> = catalogue(user_profiles(dir).0)
        .into_iter()
        .map(|l| l.profile.name)
        .collect();
    known.sort();
    Err(FindError::Unknown {
        name: name.to_string(),
        known,
    })
}
