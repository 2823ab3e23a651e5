//! The file side of recipes, kept thin: reads a recipe file, opens a registry clone (its
//! manifest, its recipe files found recursively), finds each mod's folder (the first candidate
//! holding a `run.sh`) and reads its files, and hands everything to the pure readers. A
//! recipe named by a path is read from it; a bare name is looked up in `--registry DIR`.
//! Every file goes through `crate::input`'s one reader (regular files only, capped before
//! reading); nothing outside a registry clone or checkout is read on its behalf — a recipe,
//! a manifest folder or a mod that links out of it is refused by name. Decides nothing
//! itself.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::error::{RecipeError, RecipeErrors};
use super::launch::RecipeLaunch;
use super::mods::{self, ModFile, ModFiles, ModPlace, ModSearch, RecipeMod, plain_name};
use super::registry::{
    self, MANIFEST, RecipeRegistry, RegistryDir, RegistryFile, RegistryLookupError,
};
use super::request;
use super::{Recipe, RecipeInput, common, parse};
use crate::input::{self, InputError};
use crate::profile::fit::Fit;
use crate::workload::partial::PartialServe;

/// Why a recipe could not be had (all exit 2: input or a refused recipe).
#[derive(Debug, thiserror::Error)]
pub enum RecipeLoadError {
    #[error(transparent)]
    Recipe(#[from] RecipeErrors),
    #[error("registry {path}: {cause}")]
    Registry { path: String, cause: String },
    #[error(transparent)]
    Lookup(#[from] RegistryLookupError),
    #[error("{name:?} is not a recipe file, and no --registry DIR is given to look it up in")]
    NoRegistry { name: String },
}

/// Reads `path` and everything it needs into a launch. A recipe inside the registry clone
/// must not link out of it.
pub fn load_file(
    path: &Path,
    registry: Option<&RecipeRegistry>,
    own_sub: Option<&str>,
    input: &RecipeInput,
) -> Result<RecipeLaunch, RecipeLoadError> {
    load_among(path, registry, own_sub, &[], input)
}

/// [`load_file`] with the other registries given or kept, where its mods are looked for too.
fn load_among(
    path: &Path,
    registry: Option<&RecipeRegistry>,
    own_sub: Option<&str>,
    others: &[RecipeRegistry],
    input: &RecipeInput,
) -> Result<RecipeLaunch, RecipeLoadError> {
    let file = path.display().to_string();
    let cannot = |e: InputError| {
        RecipeErrors::one(RecipeError::new(
            &file,
            "",
            format!("cannot read the recipe: {e}"),
        ))
    };
    let dir = path.parent().map(|d| in_registry_terms(d, registry));
    if let Some(reg) = registry
        && dir.as_ref().is_some_and(|d| d.starts_with(&reg.root))
    {
        input::resolve_inside(&real(&reg.root).map_err(cannot)?, path).map_err(cannot)?;
    }
    let text = input::read_utf8(path, input::YAML).map_err(cannot)?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("recipe")
        .trim_end_matches(".yaml");
    let recipe = parse(&file, stem, &text)?;
    let search = ModSearch {
        recipe_dir: dir.as_deref(),
        registry,
        own: own_sub,
        others,
    };
    // A mod not found and a problem of the recipe's own are both said.
    let (mods, not_found) = split(resolve_mods(&recipe, &search));
    match (not_found, recipe.build(input, mods)) {
        (None, Ok(launch)) => Ok(launch),
        (not_found, built) => Err(all_of([not_found, built.err()]).into()),
    }
}

/// What was found, or nothing and why.
fn split<T: Default>(r: Result<T, RecipeErrors>) -> (T, Option<RecipeErrors>) {
    match r {
        Ok(v) => (v, None),
        Err(e) => (T::default(), Some(e)),
    }
}

/// Every problem of several readings of one recipe, in the file's order (those without a line
/// last).
fn all_of<const N: usize>(found: [Option<RecipeErrors>; N]) -> RecipeErrors {
    let mut all: Vec<RecipeError> = found.into_iter().flatten().flat_map(|e| e.0).collect();
    all.sort_by_key(|e| e.line.unwrap_or(usize::MAX));
    RecipeErrors(all)
}

/// `path` with every link resolved.
fn real(path: &Path) -> Result<PathBuf, InputError> {
    std::fs::canonicalize(path).map_err(|source| InputError::Io {
        path: path.display().to_string(),
        source,
    })
}

/// A recipe's folder spelled from the registry's root when it lies inside the registry
/// however it was spelled (so that its mods are known to come from the clone); else as given.
fn in_registry_terms(dir: &Path, registry: Option<&RecipeRegistry>) -> PathBuf {
    let here = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    let inside = registry.and_then(|r| {
        let root = real(&r.root).ok()?;
        let rel = real(here).ok()?.strip_prefix(&root).ok()?.to_path_buf();
        Some(r.root.join(rel))
    });
    inside.unwrap_or_else(|| dir.to_path_buf())
}

/// Whether `name` is a recipe file (a path to a YAML file holding a recipe's fields, not a
/// launch profile's): `up` then runs it as a recipe. A file that is not UTF-8 or not YAML is
/// judged by what it holds, so that its error is reported as a recipe's.
pub fn is_recipe_file(name: &str) -> bool {
    input::read_bytes(Path::new(name), input::YAML)
        .is_ok_and(|bytes| super::detect::is_recipe(&String::from_utf8_lossy(&bytes)))
}

/// A recipe by path or by name in the registries given or kept, read with its mods' files into
/// its part of the serving request (`up RECIPE`).
pub fn load_ask(
    name: &str,
    registries: &[RegistryDir],
    input: &RecipeInput,
) -> Result<PartialServe, RecipeLoadError> {
    let launch = load(name, registries, input)?;
    // A mod that cannot be read and a problem of the request are both said.
    let (mods, unread) = split(
        read_mods(&launch.file, &launch.mods)
            .map_err(|e| RecipeErrors(common::locate_all(&launch.text, e.0))),
    );
    match (unread, request::ask(&launch, mods)) {
        (None, Ok(ask)) => Ok(ask),
        (unread, asked) => Err(all_of([unread, asked.err()]).into()),
    }
}

/// The most one mod may hold: its files travel in the plan, into every container.
pub const MOD_MAX_BYTES: usize = 64 << 20;

/// The most files one mod may hold (the mods of the recipe registries hold a handful).
pub const MOD_MAX_FILES: usize = 10_000;

/// Every file of each mod's folder, hidden ones too (as `docker cp` copies a folder), a link
/// to a file inside the mod's tree read as that file; a mod that cannot be read whole — a
/// link out of its registry or checkout, a link to a folder, a FIFO, device or socket, more
/// than [`MOD_MAX_BYTES`] — is an error naming the mod and the file.
pub fn read_mods(file: &str, mods: &[RecipeMod]) -> Result<Vec<ModFiles>, RecipeErrors> {
    let mut out = Vec::new();
    let mut errors = Vec::new();
    for (i, m) in mods.iter().enumerate() {
        let at = |problem: String| RecipeError::new(file, format!("mods[{i}]"), problem);
        if !plain_name(&m.name) {
            errors.push(
                at(format!(
                    "the mod folder {:?} is not a plain name (letters, digits, . _ -)",
                    m.name
                ))
                .fix("rename the mod's folder"),
            );
            continue;
        }
        let mut read = ModRead {
            within: &m.within,
            files: Vec::new(),
            bytes: 0,
        };
        if let Err(why) = read.folder(&m.folder, "") {
            let e = at(format!("mod {}: {why}", m.folder.display()));
            errors.push(match why {
                ModReadError::TooLarge => {
                    e.fix("bake what the mod installs into the image and give it with --image")
                }
                _ => e,
            });
            continue;
        }
        let mut files = read.files;
        files.sort_by(|a, b| a.path.cmp(&b.path));
        out.push(ModFiles {
            name: m.name.clone(),
            reference: m.reference.clone(),
            files,
        });
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(RecipeErrors(errors))
    }
}

/// Why a mod's folder cannot be read.
#[derive(Debug, thiserror::Error)]
enum ModReadError {
    #[error(transparent)]
    Input(#[from] InputError),
    #[error("{} is not a UTF-8 name", .0.display())]
    Name(PathBuf),
    #[error("{} links to a folder; copy the folder into the mod instead", .0.display())]
    LinkedFolder(PathBuf),
    #[error("{} is {kind}; a mod holds files and folders only", .path.display())]
    Special { path: PathBuf, kind: &'static str },
    #[error(
        "holds more than {} MiB or {MOD_MAX_FILES} files; spark-launch puts mods into the containers through the plan",
        MOD_MAX_BYTES >> 20
    )]
    TooLarge,
}

/// A mod's folder being read: its tree, the files so far and their bytes.
struct ModRead<'a> {
    within: &'a Path,
    files: Vec<ModFile>,
    bytes: usize,
}

impl ModRead<'_> {
    /// The files under `dir` (recursively), as paths under `prefix`. Sizes are checked before
    /// a file is read, and no read goes past what the mod may still hold.
    fn folder(&mut self, dir: &Path, prefix: &str) -> Result<(), ModReadError> {
        use std::os::unix::fs::{FileTypeExt as _, PermissionsExt as _};
        let cannot = |e: std::io::Error| {
            ModReadError::Input(InputError::Io {
                path: dir.display().to_string(),
                source: e,
            })
        };
        input::resolve_inside(self.within, dir)?;
        for e in std::fs::read_dir(dir).map_err(cannot)? {
            let e = e.map_err(cannot)?;
            let path = e.path();
            let Some(name) = e.file_name().to_str().map(str::to_string) else {
                return Err(ModReadError::Name(path));
            };
            let rel = if prefix.is_empty() {
                name
            } else {
                format!("{prefix}/{name}")
            };
            let kind = e.file_type().map_err(cannot)?;
            let meta = if kind.is_symlink() {
                let real = input::resolve_inside(self.within, &path)?;
                let meta = std::fs::metadata(&real).map_err(cannot)?;
                if meta.is_dir() {
                    return Err(ModReadError::LinkedFolder(path));
                }
                meta
            } else {
                std::fs::symlink_metadata(&path).map_err(cannot)?
            };
            let t = meta.file_type();
            if t.is_dir() {
                self.folder(&path, &rel)?;
                continue;
            }
            if !t.is_file() {
                let kind = if t.is_fifo() {
                    "a FIFO"
                } else if t.is_socket() {
                    "a socket"
                } else {
                    "a device"
                };
                return Err(ModReadError::Special { path, kind });
            }
            let room = MOD_MAX_BYTES.saturating_sub(self.bytes);
            if self.files.len() >= MOD_MAX_FILES || meta.len() > room as u64 {
                return Err(ModReadError::TooLarge);
            }
            let limit = input::InputLimit {
                max: room as u64,
                hint: "the mod grew while it was read",
            };
            let bytes = input::read_bytes(&path, limit).map_err(|e| match e {
                InputError::TooLarge { .. } => ModReadError::TooLarge,
                other => ModReadError::Input(other),
            })?;
            self.bytes += bytes.len();
            self.files.push(ModFile {
                path: rel,
                mode: meta.permissions().mode() & 0o777,
                bytes,
            });
        }
        Ok(())
    }
}

/// A recipe by path (`x.yaml`, `dir/x.yaml`) or by name (`NAME`, `@SUB/NAME`) in the registries
/// given or kept, in their order.
pub fn load(
    name: &str,
    registries: &[RegistryDir],
    input: &RecipeInput,
) -> Result<RecipeLaunch, RecipeLoadError> {
    let regs = open_registries(registries)?;
    let as_path = Path::new(name);
    let looks_like_path = !name.starts_with('@')
        && (name.ends_with(".yaml") || name.ends_with(".yml") || name.contains('/'));
    if looks_like_path || (as_path.is_file() && regs.is_empty()) {
        // The registry the file lies in, when it lies in one, is its own.
        let own = regs.iter().position(|r| {
            let root = real(&r.root).ok();
            let file = real(as_path).ok();
            matches!((&root, &file), (Some(root), Some(file)) if file.starts_with(root))
        });
        let others = without(&regs, own);
        return load_among(as_path, own.map(|i| &regs[i]), None, &others, input);
    }
    if regs.is_empty() {
        return Err(RecipeLoadError::NoRegistry {
            name: name.to_string(),
        });
    }
    let mut files = Vec::new();
    for (i, reg) in regs.iter().enumerate() {
        files.extend(registry_files(reg)?.into_iter().map(|mut f| {
            f.registry = i;
            f
        }));
    }
    let roots: Vec<String> = regs.iter().map(|r| r.root.display().to_string()).collect();
    let hidden = |f: &RegistryFile| regs[f.registry].sub(&f.sub).is_some_and(|s| !s.visible);
    let found = registry::lookup(&files, &roots.join(", "), &hidden, name)?;
    let others = without(&regs, Some(found.registry));
    load_among(
        &found.path,
        Some(&regs[found.registry]),
        Some(&found.sub),
        &others,
        input,
    )
}

/// Every registry but the one at `skip`.
fn without(regs: &[RecipeRegistry], skip: Option<usize>) -> Vec<RecipeRegistry> {
    regs.iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != skip)
        .map(|(_, r)| r.clone())
        .collect()
}

/// The layouts of the registries given or kept, in their order.
pub fn open_registries(dirs: &[RegistryDir]) -> Result<Vec<RecipeRegistry>, RecipeLoadError> {
    dirs.iter()
        .map(|d| Ok(open_registry_from(&d.path, d.source.as_deref())?.named(d.name.as_deref())))
        .collect()
}

/// The layout of the registry clone at `dir`. The manifest and every folder it names must lie
/// inside the clone, links resolved.
pub fn open_registry(dir: &Path) -> Result<RecipeRegistry, RecipeLoadError> {
    open_registry_from(dir, None)
}

/// [`open_registry`] for a clone of `source` (a git URL, when known): sparkrun's built-in
/// sub-registries of a repository it knows that the manifest leaves out are added where their
/// folder is in the clone.
fn open_registry_from(dir: &Path, source: Option<&str>) -> Result<RecipeRegistry, RecipeLoadError> {
    let err = |cause: String| RecipeLoadError::Registry {
        path: dir.display().to_string(),
        cause,
    };
    if !dir.is_dir() {
        return Err(err("not a folder (give the folder of a local clone)".into()));
    }
    let root = real(dir).map_err(|e| err(e.to_string()))?;
    let manifest = dir.join(MANIFEST);
    let reg = if std::fs::symlink_metadata(&manifest).is_ok() {
        let text = input::resolve_inside(&root, &manifest)
            .and_then(|m| input::read_utf8(&m, input::YAML))
            .map_err(|e| err(format!("cannot read {MANIFEST}: {e}")))?;
        RecipeRegistry::from_manifest(dir, &text).map_err(err)?
    } else {
        RecipeRegistry::without_manifest(dir, dir.join("recipes").is_dir())
    };
    let mut reg = reg;
    for b in reg.builtin_missing(source) {
        if dir.join(b.recipes).is_dir() {
            reg = reg.with_builtin(&b).map_err(err)?;
        }
    }
    for sub in &reg.subs {
        for folder in std::iter::once(&sub.recipes).chain(sub.mods.as_ref()) {
            if std::fs::symlink_metadata(folder).is_ok() {
                input::resolve_inside(&root, folder).map_err(|e| err(e.to_string()))?;
            }
        }
    }
    Ok(reg)
}

/// Every recipe file of the registry (`*.yaml`/`*.yml`, recursively; hidden folders, other
/// files and folders linking out of the clone skipped, each folder walked once), sorted by
/// sub-registry and path.
pub fn registry_files(reg: &RecipeRegistry) -> Result<Vec<RegistryFile>, RecipeLoadError> {
    let err = |e: InputError| RecipeLoadError::Registry {
        path: reg.root.display().to_string(),
        cause: e.to_string(),
    };
    let root = real(&reg.root).map_err(err)?;
    let mut out = Vec::new();
    for sub in &reg.subs {
        if !sub.recipes.is_dir() {
            continue;
        }
        let walk = input::walk(
            &root,
            &sub.recipes,
            // The registry root may hold the recipes; its mods folder holds none.
            |p| sub.mods.as_deref() != Some(p),
            |p| p.extension().is_some_and(|x| x == "yaml" || x == "yml"),
        )
        .map_err(err)?;
        for skipped in &walk.outside {
            tracing::warn!("registry: {skipped}");
        }
        out.extend(walk.files.into_iter().map(|path| {
            RegistryFile {
                registry: 0,
                sub: sub.name.clone(),
                folder: path
                    .parent()
                    .and_then(|d| d.strip_prefix(&sub.recipes).ok())
                    .map(|d| d.to_string_lossy().into_owned())
                    .unwrap_or_default(),
                name: path
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .unwrap_or_default()
                    .to_string(),
                path,
            }
        }));
    }
    Ok(out)
}

/// One recipe of a registry listing: the launch it reads as, or why it does not.
#[derive(Debug, Serialize)]
pub struct RegistryEntry {
    pub file: RegistryFile,
    /// Listed as hidden (`visible: false` sub-registry).
    pub hidden: bool,
    pub launch: Option<RecipeLaunch>,
    /// The problems, when it does not read.
    pub problems: Vec<String>,
}

impl RegistryEntry {
    /// `@SUB/NAME`: how `up NAME --registry DIR` names it unambiguously.
    pub fn label(&self) -> String {
        format!("@{}/{}", self.file.sub, self.file.name)
    }

    /// Whether this version can run it on `nodes` nodes (`None`: not known); one that does
    /// not read cannot, its problems said briefly (without file, line and fix).
    pub fn fit(&self, nodes: Option<usize>) -> Option<Fit> {
        match &self.launch {
            Some(l) => request::fit(l, nodes),
            None => {
                let file = self.file.path.display().to_string();
                let brief = self.problems.iter().map(|p| {
                    let rest = p.strip_prefix(file.as_str()).unwrap_or(p);
                    let rest = rest
                        .trim_start_matches(|c: char| c == ':' || c == ' ' || c.is_ascii_digit());
                    rest.split("; ").next().unwrap_or(rest).to_string()
                });
                Some(Fit::No(brief.collect()))
            }
        }
    }
}

/// Every recipe of the registries given or kept, each read with `input` (its mods looked for
/// across all of them).
pub fn list(
    dirs: &[RegistryDir],
    input: &RecipeInput,
) -> Result<Vec<RegistryEntry>, RecipeLoadError> {
    let regs = open_registries(dirs)?;
    let mut out = Vec::new();
    for (i, reg) in regs.iter().enumerate() {
        let others = without(&regs, Some(i));
        out.extend(list_one(reg, &others, input)?);
    }
    Ok(out)
}

/// Every recipe of one registry.
fn list_one(
    reg: &RecipeRegistry,
    others: &[RecipeRegistry],
    input: &RecipeInput,
) -> Result<Vec<RegistryEntry>, RecipeLoadError> {
    let files = registry_files(reg)?;
    Ok(files
        .into_iter()
        .map(|file| {
            let hidden = reg.sub(&file.sub).is_some_and(|s| !s.visible);
            let (launch, problems) =
                match load_among(&file.path, Some(reg), Some(&file.sub), others, input) {
                    Ok(l) => (Some(l), Vec::new()),
                    Err(RecipeLoadError::Recipe(es)) => {
                        (None, es.0.iter().map(|e| e.to_string()).collect())
                    }
                    Err(e) => (None, vec![e.to_string()]),
                };
            RegistryEntry {
                file,
                hidden,
                launch,
                problems,
            }
        })
        .collect())
}

/// Each mod of the recipe as a folder holding `run.sh`; every one missing is an error at its
/// line naming every place looked.
pub fn resolve_mods(recipe: &Recipe, search: &ModSearch) -> Result<Vec<RecipeMod>, RecipeErrors> {
    let mut out: Vec<RecipeMod> = Vec::new();
    let mut errors = Vec::new();
    for (i, reference) in recipe.mods().iter().enumerate() {
        let field = format!("mods[{i}]");
        let at = |problem: String| common::located(recipe.file(), recipe.text(), &field, problem);
        let candidates = match mods::candidates(reference, search) {
            Ok(c) => c,
            Err(why) => {
                errors.push(at(why));
                continue;
            }
        };
        let hit = candidates
            .iter()
            .find(|p| p.folder.is_dir() && p.folder.join("run.sh").is_file());
        let Some(ModPlace { folder, within }) = hit else {
            let looked: Vec<String> = candidates
                .iter()
                .map(|p| {
                    if p.folder.is_dir() {
                        format!("{} (no run.sh)", p.folder.display())
                    } else {
                        p.folder.display().to_string()
                    }
                })
                .collect();
            let fix = if reference.starts_with("mods/") {
                "put the mod folder (with its run.sh) next to the recipe, or give the registry it comes from with --registry DIR (mods named mods/… usually come from a clone of eugr/spark-vllm-docker)"
            } else {
                "put the mod folder (with its run.sh) next to the recipe, or give the registry it comes from with --registry DIR"
            };
            errors.push(
                at(format!(
                    "mod {reference:?} not found; looked in: {}",
                    looked.join(", ")
                ))
                .fix(fix),
            );
            continue;
        };
        // The mod stays inside the registry or checkout it comes from, links resolved.
        let within = match real(within).and_then(|w| input::resolve_inside(&w, folder).map(|_| w)) {
            Ok(w) => w,
            Err(e) => {
                errors.push(
                    at(format!("mod {reference:?}: {e}"))
                        .fix("a mod's files live in its folder inside the registry or checkout"),
                );
                continue;
            }
        };
        let name = folder
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or(reference)
            .to_string();
        if let Some(prev) = out.iter().find(|m| m.name == name) {
            errors.push(at(format!(
                "mod {reference:?} and {:?} are both named {name}; they would land in the same /workspace/mods/{name}",
                prev.reference
            )));
            continue;
        }
        out.push(RecipeMod {
            name,
            reference: reference.clone(),
            folder: folder.clone(),
            within,
        });
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(RecipeErrors(errors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, rel: &str, text: &str) {
        let p = dir.join(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, text).unwrap();
    }

    const V2: &str = "recipe_version: \"2\"\nmodel: org/m\nruntime: vllm\ncontainer: img:1\nmods:\n  - fix-a\ncommand: vllm serve {model}\n";
    const V2_PLAIN: &str = "recipe_version: \"2\"\nmodel: org/m\nruntime: vllm\ncontainer: img:1\ncommand: vllm serve {model}\n";

    #[test]
    fn a_mod_next_to_the_recipe_is_resolved_to_its_folder() {
        let t = tempfile::tempdir().unwrap();
        write(t.path(), "r.yaml", V2);
        write(t.path(), "mods/fix-a/run.sh", "#!/bin/sh\n");
        let l = load_file(
            &t.path().join("r.yaml"),
            None,
            None,
            &RecipeInput::default(),
        )
        .unwrap();
        assert_eq!(l.mods.len(), 1);
        assert_eq!(l.mods[0].name, "fix-a");
        assert_eq!(l.mods[0].folder, t.path().join("mods/fix-a"));
    }

    #[test]
    fn a_mod_s_files_are_read_whole_with_their_paths_and_modes() {
        use std::os::unix::fs::PermissionsExt as _;
        let t = tempfile::tempdir().unwrap();
        write(t.path(), "r.yaml", V2);
        write(t.path(), "mods/fix-a/run.sh", "#!/bin/sh\necho fixed\n");
        write(t.path(), "mods/fix-a/patches/a.diff", "--- a\n");
        write(t.path(), "mods/fix-a/.hidden", "x");
        let run = t.path().join("mods/fix-a/run.sh");
        std::fs::set_permissions(&run, std::fs::Permissions::from_mode(0o755)).unwrap();
        let l = load_file(
            &t.path().join("r.yaml"),
            None,
            None,
            &RecipeInput::default(),
        )
        .unwrap();
        let mods = read_mods(&l.file, &l.mods).unwrap();
        let files: Vec<(&str, u32)> = mods[0]
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.mode))
            .collect();
        assert_eq!(
            files,
            [
                (".hidden", 0o644),
                ("patches/a.diff", 0o644),
                ("run.sh", 0o755)
            ]
        );
        assert_eq!(mods[0].files[2].bytes, b"#!/bin/sh\necho fixed\n");
    }

    #[test]
    fn a_missing_mod_is_refused_naming_where_it_looked() {
        let t = tempfile::tempdir().unwrap();
        write(t.path(), "r.yaml", V2);
        write(t.path(), "fix-a/README", "no run.sh here");
        let Err(RecipeLoadError::Recipe(e)) = load_file(
            &t.path().join("r.yaml"),
            None,
            None,
            &RecipeInput::default(),
        ) else {
            panic!("a missing mod was not refused");
        };
        let text = e.0[0].to_string();
        let root = t.path().display();
        assert_eq!(
            text,
            format!(
                "{root}/r.yaml:6: mods[0]: mod \"fix-a\" not found; looked in: {root}/fix-a (no run.sh), {root}/mods/fix-a; put the mod folder (with its run.sh) next to the recipe, or give the registry it comes from with --registry DIR"
            )
        );
    }

    #[test]
    fn a_registry_is_listed_and_a_recipe_found_by_name_with_registry_mods() {
        let t = tempfile::tempdir().unwrap();
        write(
            t.path(),
            MANIFEST,
            "registries:\n  - name: official\n    recipes: official-recipes\n    mods: official-mods\n",
        );
        write(t.path(), "official-recipes/qwen/q.yaml", V2);
        write(t.path(), "official-recipes/qwen/notes.md", "not a recipe");
        write(t.path(), "official-mods/fix-a/run.sh", "#!/bin/sh\n");
        let reg = open_registry(t.path()).unwrap();
        let files = registry_files(&reg).unwrap();
        assert_eq!(files.len(), 1);
        assert_eq!(
            (files[0].sub.as_str(), files[0].name.as_str()),
            ("official", "q")
        );
        let dirs = [RegistryDir::given(t.path().to_path_buf())];
        let l = load("q", &dirs, &RecipeInput::default()).unwrap();
        assert_eq!(l.mods[0].folder, t.path().join("official-mods/fix-a"));
        let listed = list(&dirs, &RecipeInput::default()).unwrap();
        assert!(listed[0].launch.is_some(), "{:?}", listed[0].problems);
    }

    #[test]
    fn a_mod_no_other_place_holds_is_taken_from_eugr_s_registry_as_sparkrun_falls_back() {
        let t = tempfile::tempdir().unwrap();
        let arena = t.path().join("arena");
        write(
            &arena,
            MANIFEST,
            "registries:\n  - name: official\n    recipes: official-recipes\n    mods: official-mods\n",
        );
        write(
            &arena,
            "official-recipes/q.yaml",
            &V2.replace("fix-a", "mods/fix-eugr"),
        );
        let eugr = t.path().join("spark-vllm-docker");
        write(
            &eugr,
            "recipes/other.yaml",
            &V2.replace("fix-a", "mods/fix-eugr"),
        );
        write(&eugr, "mods/fix-eugr/run.sh", "#!/bin/sh\n");
        // Only the arena registry: the mod is nowhere.
        let arena_only = [RegistryDir::given(arena.clone())];
        let e = load("q", &arena_only, &RecipeInput::default()).unwrap_err();
        assert!(
            e.to_string().contains("mod \"mods/fix-eugr\" not found"),
            "{e}"
        );
        // With eugr's checkout kept under its name, the mod is found there; and the recipe by
        // sparkrun's scoped name.
        let both = [
            RegistryDir::given(arena),
            RegistryDir {
                path: eugr.clone(),
                name: Some("eugr".into()),
                source: None,
            },
        ];
        let l = load("@official/q", &both, &RecipeInput::default()).unwrap();
        assert_eq!(l.mods[0].folder, eugr.join("mods/fix-eugr"));
        let l = load("@eugr/other", &both, &RecipeInput::default()).unwrap();
        assert_eq!(l.name, "other");
        let listed = list(&both, &RecipeInput::default()).unwrap();
        assert_eq!(listed.len(), 2);
        assert!(listed.iter().all(|e| e.launch.is_some()), "{listed:?}");
    }

    #[test]
    fn a_sub_registry_sparkrun_knows_but_the_manifest_leaves_out_is_found_by_its_name() {
        // Laid out as dbotwinick/sparkrun-recipe-registry: its manifest names only
        // sparkrun-testing (testing/recipes, hidden); sparkrun's built-in list also names
        // sparkrun-transitional (transitional/recipes) in the same repository.
        let t = tempfile::tempdir().unwrap();
        write(
            t.path(),
            MANIFEST,
            "registries:\n  - name: sparkrun-testing\n    recipes: testing/recipes\n    visible: false\n",
        );
        write(
            t.path(),
            "testing/recipes/qwen3/demo-testing.yaml",
            V2_PLAIN,
        );
        write(
            t.path(),
            "transitional/recipes/qwen3/demo-moved.yaml",
            V2_PLAIN,
        );
        let dirs = [RegistryDir::given(t.path().to_path_buf())];
        let l = load(
            "@sparkrun-transitional/demo-moved",
            &dirs,
            &RecipeInput::default(),
        )
        .unwrap();
        assert_eq!(
            l.file,
            t.path()
                .join("transitional/recipes/qwen3/demo-moved.yaml")
                .display()
                .to_string()
        );
        // A bare name finds it too (the sub-registry is visible, as sparkrun lists it), and
        // the manifest's own sub-registry still reads.
        assert!(load("demo-moved", &dirs, &RecipeInput::default()).is_ok());
        assert!(
            load(
                "@sparkrun-testing/demo-testing",
                &dirs,
                &RecipeInput::default()
            )
            .is_ok()
        );
        let listed = list(&dirs, &RecipeInput::default()).unwrap();
        let labels: Vec<(String, bool)> = listed.iter().map(|e| (e.label(), e.hidden)).collect();
        assert_eq!(
            labels,
            [
                ("@sparkrun-testing/demo-testing".to_string(), true),
                ("@sparkrun-transitional/demo-moved".to_string(), false)
            ]
        );
        // A clone without the folder gets no such sub-registry.
        std::fs::remove_dir_all(t.path().join("transitional")).unwrap();
        let e = load(
            "@sparkrun-transitional/demo-moved",
            &dirs,
            &RecipeInput::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("no recipe"), "{e}");
    }

    /// Every problem `up FILE` reports for the recipe `text`, as `file:line: field: what`.
    fn problems(text: &str) -> Vec<String> {
        let t = tempfile::tempdir().unwrap();
        write(t.path(), "r.yaml", text);
        let path = t.path().join("r.yaml");
        let input = RecipeInput {
            user_env: [("HF_TOKEN".to_string(), "hf_x".to_string())].into(),
            ..RecipeInput::default()
        };
        let Err(RecipeLoadError::Recipe(e)) = load_ask(path.to_str().unwrap(), &[], &input) else {
            panic!("the recipe was not refused");
        };
        let root = format!("{}/", t.path().display());
        e.0.iter()
            .map(|e| {
                let shown = e.to_string();
                shown.strip_prefix(&root).unwrap_or(&shown).to_string()
            })
            .collect()
    }

    #[test]
    fn a_v2_recipe_s_independent_problems_are_all_reported_each_at_its_line() {
        // A runtime no engine answers to stops the command's reading, not the image's, the
        // env's or the mods'.
        let said = problems(
            "recipe_version: \"2\"\nmodel: org/m\nruntime: mystery\ncontainer: -bad\nmods:\n  - fix-nowhere\nenv:\n  X: \"{launch.nope}\"\ncommand: vllm serve {model}\n",
        );
        assert_eq!(said.len(), 4, "{said:#?}");
        for (at, what) in [
            ("r.yaml:3: runtime:", "mystery"),
            ("r.yaml:4: container:", ""),
            ("r.yaml:6: mods[0]:", "fix-nowhere"),
            ("r.yaml:8: env.X:", "nope"),
        ] {
            assert!(
                said.iter().any(|s| s.starts_with(at) && s.contains(what)),
                "no {at} … {what} in {said:#?}"
            );
        }
    }

    #[test]
    fn a_v2_recipe_s_problems_in_its_command_and_in_its_request_are_both_reported() {
        // A port that is no port (found when the line becomes a request) beside a secret under
        // a name that does not say so.
        let said = problems(
            "recipe_version: \"2\"\nmodel: org/m\nruntime: vllm\ncontainer: img:1\nenv:\n  PLAIN: \"$HF_TOKEN\"\ncommand: vllm serve {model} --port nope\n",
        );
        assert_eq!(said.len(), 2, "{said:#?}");
        assert!(
            said[0].starts_with("r.yaml:6: env.PLAIN: takes a secret"),
            "{said:#?}"
        );
        assert!(
            said[1].starts_with("r.yaml:7: command: the API port \"nope\""),
            "{said:#?}"
        );
    }

    #[test]
    fn a_v1_recipe_s_command_and_image_problems_are_both_reported() {
        let said = problems(
            "recipe_version: \"1\"\nname: r\ncontainer: -bad\ncommand: ./launch.sh {model}\ndefaults:\n  model: org/m\n",
        );
        assert_eq!(said.len(), 2, "{said:#?}");
        assert!(said[0].starts_with("r.yaml:3: container:"), "{said:#?}");
        assert!(
            said[1].starts_with("r.yaml:4: command: `./launch.sh org/m` starts no engine"),
            "{said:#?}"
        );
    }

    #[test]
    fn a_bare_name_without_a_registry_is_refused() {
        let e = load("no-such-recipe", &[], &RecipeInput::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"no-such-recipe\" is not a recipe file, and no --registry DIR is given to look it up in"
        );
    }

    /// A registry clone (manifest, one sub-registry with a mods folder) holding `q.yaml`
    /// (`V2`, mod `fix-a`) and the mod's `run.sh`; and a private key outside it.
    fn registry_with_a_key_outside() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let t = tempfile::tempdir().unwrap();
        let reg = t.path().join("reg");
        write(
            &reg,
            MANIFEST,
            "registries:\n  - name: official\n    recipes: recipes\n    mods: mods\n",
        );
        write(&reg, "recipes/q.yaml", V2);
        write(&reg, "mods/fix-a/run.sh", "#!/bin/sh\ncat key\n");
        let key = t.path().join("home/.ssh/id_ed25519");
        write(
            t.path(),
            "home/.ssh/id_ed25519",
            "-----BEGIN OPENSSH PRIVATE KEY-----\n",
        );
        (t, reg, key)
    }

    fn refusal(reg: &Path) -> String {
        let launch = load(
            "q",
            &[RegistryDir::given(reg.to_path_buf())],
            &RecipeInput::default(),
        );
        match launch {
            Ok(l) => read_mods(&l.file, &l.mods).unwrap_err().to_string(),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn a_mod_file_that_links_outside_the_registry_is_refused_by_name() {
        let (_t, reg, key) = registry_with_a_key_outside();
        std::os::unix::fs::symlink(&key, reg.join("mods/fix-a/key")).unwrap();
        let e = refusal(&reg);
        assert!(
            e.contains("mods/fix-a/key links outside")
                && e.contains(&format!("(to {})", key.display())),
            "{e}"
        );
        // A link to a file inside the clone is read as that file.
        std::fs::remove_file(reg.join("mods/fix-a/key")).unwrap();
        write(&reg, "shared/notes.txt", "shared");
        std::os::unix::fs::symlink("../../shared/notes.txt", reg.join("mods/fix-a/notes")).unwrap();
        let l = load(
            "q",
            &[RegistryDir::given(reg.clone())],
            &RecipeInput::default(),
        )
        .unwrap();
        let mods = read_mods(&l.file, &l.mods).unwrap();
        assert_eq!(mods[0].files[0].path, "notes");
        assert_eq!(mods[0].files[0].bytes, b"shared");
    }

    #[test]
    fn a_mod_folder_that_links_outside_the_registry_is_refused_by_name() {
        let (t, reg, _key) = registry_with_a_key_outside();
        write(t.path(), "home/.ssh/run.sh", "#!/bin/sh\n");
        std::fs::remove_dir_all(reg.join("mods/fix-a")).unwrap();
        std::os::unix::fs::symlink(t.path().join("home/.ssh"), reg.join("mods/fix-a")).unwrap();
        let e = refusal(&reg);
        assert!(e.contains("mods[0]: mod \"fix-a\":"), "{e}");
        assert!(e.contains("mods/fix-a links outside"), "{e}");
    }

    #[test]
    fn an_absolute_mod_path_in_a_registry_recipe_is_refused() {
        let (t, reg, _key) = registry_with_a_key_outside();
        write(t.path(), "home/.ssh/run.sh", "#!/bin/sh\n");
        let abs = t.path().join("home/.ssh");
        write(
            &reg,
            "recipes/q.yaml",
            &V2.replace("  - fix-a", &format!("  - {}", abs.display())),
        );
        let e = refusal(&reg);
        assert!(e.contains("is an absolute path"), "{e}");
    }

    #[test]
    fn fifos_and_devices_in_a_mod_are_refused_by_name() {
        let (_t, reg, _key) = registry_with_a_key_outside();
        let fifo = reg.join("mods/fix-a/pipe");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        let e = refusal(&reg);
        assert!(
            e.contains("mods/fix-a/pipe is a FIFO; a mod holds files and folders only"),
            "{e}"
        );
    }

    #[test]
    fn a_mod_over_the_cap_is_refused_by_its_size_before_a_byte_is_read() {
        let (_t, reg, _key) = registry_with_a_key_outside();
        // A sparse file of 64 GiB: reading it whole would take minutes and all memory.
        let big = std::fs::File::create(reg.join("mods/fix-a/weights.bin")).unwrap();
        big.set_len(64 << 30).unwrap();
        let started = std::time::Instant::now();
        let e = refusal(&reg);
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        assert!(e.contains("holds more than 64 MiB"), "{e}");
    }

    #[test]
    fn a_registry_walk_follows_no_link_out_and_enters_each_folder_once() {
        let (_t, reg, _key) = registry_with_a_key_outside();
        for dir in ["recipes", "recipes/sub"] {
            std::fs::create_dir_all(reg.join(dir)).unwrap();
            std::os::unix::fs::symlink(".", reg.join(dir).join("a")).unwrap();
            std::os::unix::fs::symlink(".", reg.join(dir).join("b")).unwrap();
        }
        std::os::unix::fs::symlink("/usr", reg.join("recipes/usr")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", reg.join("recipes/zero.yaml")).unwrap();
        let started = std::time::Instant::now();
        let listed = list(&[RegistryDir::given(reg.clone())], &RecipeInput::default()).unwrap();
        assert!(started.elapsed() < std::time::Duration::from_secs(2));
        let names: Vec<&str> = listed.iter().map(|e| e.file.name.as_str()).collect();
        assert_eq!(names, ["q", "zero"]);
        assert!(
            listed[1].problems[0].contains("recipes/zero.yaml links outside")
                && listed[1].problems[0].contains("(to /dev/zero)"),
            "{:?}",
            listed[1].problems
        );
        let e = load(
            "zero",
            &[RegistryDir::given(reg.clone())],
            &RecipeInput::default(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("(to /dev/zero)"), "{e}");
    }

    #[test]
    fn a_manifest_folder_linked_out_of_the_clone_is_refused() {
        let (_t, reg, _key) = registry_with_a_key_outside();
        std::fs::remove_dir_all(reg.join("recipes")).unwrap();
        std::os::unix::fs::symlink("/usr", reg.join("recipes")).unwrap();
        let e = list(&[RegistryDir::given(reg.clone())], &RecipeInput::default()).unwrap_err();
        assert!(e.to_string().contains("recipes links outside"), "{e}");
    }

    #[test]
    fn a_recipe_that_is_a_fifo_is_refused_not_read() {
        let t = tempfile::tempdir().unwrap();
        let fifo = t.path().join("r.yaml");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::S_IRWXU).unwrap();
        assert!(!is_recipe_file(fifo.to_str().unwrap()));
        let e = load_file(&fifo, None, None, &RecipeInput::default()).unwrap_err();
        assert!(
            e.to_string()
                .contains("is not a regular file (a FIFO is never read)"),
            "{e}"
        );
    }

    #[test]
    fn a_recipe_with_a_yaml_error_is_a_recipe_and_its_error_a_recipe_error() {
        let t = tempfile::tempdir().unwrap();
        for (text, problem) in [
            (
                "recipe_version: \"2\"\nmodel: org/m\ndefaults:\n\tport: 1\n",
                "r.yaml:4:1: not valid YAML: a tab in the indentation",
            ),
            (
                "recipe_version: \"2\"\nmodel: org/m\n---\nmodel: org/n\n",
                "r.yaml:3: not valid YAML: more than one YAML document (another starts at line 3)",
            ),
            (
                "recipe_version: \"2\"\nmodel: org/m\nenv:\n  X: !!python/object/apply:os.system [id]\n",
                "r.yaml:4: not valid YAML: the tag !!python/object/apply:os.system at line 4 is refused",
            ),
        ] {
            write(t.path(), "r.yaml", text);
            let path = t.path().join("r.yaml");
            assert!(is_recipe_file(path.to_str().unwrap()), "{text}");
            let e = load_file(&path, None, None, &RecipeInput::default()).unwrap_err();
            let shown = e.to_string();
            assert!(shown.contains(problem), "{shown}");
        }
        std::fs::write(
            t.path().join("r.yaml"),
            b"recipe_version: \"2\"\nmodel: caf\xe9\n",
        )
        .unwrap();
        let path = t.path().join("r.yaml");
        assert!(is_recipe_file(path.to_str().unwrap()));
        let e = load_file(&path, None, None, &RecipeInput::default()).unwrap_err();
        assert!(e.to_string().contains("r.yaml:2: not UTF-8 text"), "{e}");
    }

    #[test]
    fn duplicate_keys_are_read_as_pyyaml_reads_them_naming_both_lines() {
        let t = tempfile::tempdir().unwrap();
        write(
            t.path(),
            "r.yaml",
            "recipe_version: \"2\"\nmodel: org/m\nruntime: vllm\ncontainer: c:1\ndefaults:\n  port: 1\n  port: 9000\ncommand: vllm serve {model} --port {port}\n",
        );
        let l = load_file(
            &t.path().join("r.yaml"),
            None,
            None,
            &RecipeInput::default(),
        )
        .unwrap();
        assert!(
            l.argv
                .ends_with(&["--port".to_string(), "9000".to_string()]),
            "{:?}",
            l.argv
        );
        let w = l
            .warnings
            .iter()
            .find(|w| w.field == "defaults.port")
            .expect("a warning about the duplicate");
        assert_eq!(
            w.message,
            "given more than once (lines 6 and 7): the last value is used, as the recipe runners (PyYAML) read it"
        );
    }

    #[test]
    fn merge_keys_in_a_recipe_are_applied_as_pyyaml_applies_them() {
        let t = tempfile::tempdir().unwrap();
        write(
            t.path(),
            "r.yaml",
            "recipe_version: \"2\"\nmodel: org/m\nruntime: vllm\ncontainer: c:1\nbase: &base\n  port: 8000\n  max_model_len: 4096\ndefaults:\n  <<: *base\n  port: 9000\ncommand: vllm serve {model} --port {port} --max-model-len {max_model_len}\n",
        );
        let l = load_file(
            &t.path().join("r.yaml"),
            None,
            None,
            &RecipeInput::default(),
        )
        .unwrap();
        assert!(
            l.argv
                .ends_with(&["--port", "9000", "--max-model-len", "4096"].map(String::from)),
            "{:?}",
            l.argv
        );
    }
}
