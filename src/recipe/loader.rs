//! The file side of recipes, kept thin: reads a recipe file, opens a registry clone (its
//! manifest, its recipe files found recursively), finds each mod's folder (the first candidate
//! holding a `run.sh`) and reads its files, and hands everything to the pure readers. A
//! recipe named by a path is read from it; a bare name is looked up in `--registry DIR`.
//! Decides nothing itself.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::error::{RecipeError, RecipeErrors};
use super::launch::RecipeLaunch;
use super::mods::{self, ModFile, ModFiles, ModSearch, RecipeMod, plain_name};
use super::registry::{self, MANIFEST, RecipeRegistry, RegistryFile, RegistryLookupError};
use super::request::{self, RecipeOverrides};
use super::{Recipe, RecipeInput, common, parse};
use crate::profile::fit::Fit;
use crate::workload::launch::LaunchRequest;

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

/// Reads `path` and everything it needs into a launch.
pub fn load_file(
    path: &Path,
    registry: Option<&RecipeRegistry>,
    own_sub: Option<&str>,
    input: &RecipeInput,
) -> Result<RecipeLaunch, RecipeLoadError> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| {
        RecipeErrors::one(RecipeError::new(
            &file,
            "",
            format!("cannot read the recipe: {e}"),
        ))
    })?;
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("recipe")
        .trim_end_matches(".yaml");
    let recipe = parse(&file, stem, &text)?;
    let search = ModSearch {
        recipe_dir: path.parent(),
        registry,
        own: own_sub,
    };
    let mods = resolve_mods(&recipe, &search)?;
    Ok(recipe.build(input, mods)?)
}

/// Whether `name` is a recipe file (a path to a YAML file holding a recipe's fields, not a
/// launch profile's): `up` then runs it as a recipe.
pub fn is_recipe_file(name: &str) -> bool {
    let path = Path::new(name);
    path.is_file()
        && std::fs::read_to_string(path).is_ok_and(|text| super::detect::is_recipe(&text))
}

/// A recipe by path or by name in `--registry DIR`, read with its mods' files into the
/// serving request it asks for (`up RECIPE`).
pub fn load_request(
    name: &str,
    registry_dir: Option<&Path>,
    input: &RecipeInput,
    o: &RecipeOverrides,
) -> Result<LaunchRequest, RecipeLoadError> {
    let launch = load(name, registry_dir, input)?;
    let mods = read_mods(&launch.file, &launch.mods)?;
    Ok(request::request(&launch, mods, o)?)
}

/// The most one mod may hold: its files travel in the plan, into every container.
pub const MOD_MAX_BYTES: usize = 64 << 20;

/// Every file of each mod's folder, hidden ones too (as `docker cp` copies a folder), a link
/// to a file read as that file; a mod that cannot be read whole is an error naming it.
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
        let mut files = Vec::new();
        if let Err(why) = read_folder(&m.folder, "", &mut files) {
            errors.push(at(format!("mod {}: {why}", m.folder.display())));
            continue;
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        let mod_files = ModFiles {
            name: m.name.clone(),
            reference: m.reference.clone(),
            files,
        };
        if mod_files.size() > MOD_MAX_BYTES {
            errors.push(
                at(format!(
                    "mod {} holds {} MiB; spark-launch puts mods into the containers through the plan and takes at most {} MiB",
                    m.folder.display(),
                    mod_files.size() >> 20,
                    MOD_MAX_BYTES >> 20
                ))
                .fix("bake what the mod installs into the image and give it with --image"),
            );
            continue;
        }
        out.push(mod_files);
    }
    if errors.is_empty() {
        Ok(out)
    } else {
        Err(RecipeErrors(errors))
    }
}

/// The files under `dir` (recursively), as paths under `prefix`.
fn read_folder(dir: &Path, prefix: &str, out: &mut Vec<ModFile>) -> Result<(), String> {
    use std::os::unix::fs::PermissionsExt as _;
    let entries =
        std::fs::read_dir(dir).map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    for e in entries {
        let e = e.map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        let path = e.path();
        let Some(name) = e.file_name().to_str().map(str::to_string) else {
            return Err(format!("{} is not a UTF-8 name", path.display()));
        };
        let rel = if prefix.is_empty() {
            name
        } else {
            format!("{prefix}/{name}")
        };
        let meta = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
        let link = e.file_type().is_ok_and(|t| t.is_symlink());
        if meta.is_dir() && link {
            return Err(format!(
                "{} links to a folder; copy the folder into the mod instead",
                path.display()
            ));
        } else if meta.is_dir() {
            read_folder(&path, &rel, out)?;
        } else if meta.is_file() {
            let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            out.push(ModFile {
                path: rel,
                mode: meta.permissions().mode() & 0o777,
                bytes,
            });
        }
    }
    Ok(())
}

/// A recipe by path (`x.yaml`, `dir/x.yaml`) or by name in the registry at `registry_dir`.
pub fn load(
    name: &str,
    registry_dir: Option<&Path>,
    input: &RecipeInput,
) -> Result<RecipeLaunch, RecipeLoadError> {
    let registry = registry_dir.map(open_registry).transpose()?;
    let as_path = Path::new(name);
    let looks_like_path = !name.starts_with('@')
        && (name.ends_with(".yaml") || name.ends_with(".yml") || name.contains('/'));
    if looks_like_path || (as_path.is_file() && registry.is_none()) {
        return load_file(as_path, registry.as_ref(), None, input);
    }
    let Some(reg) = registry else {
        return Err(RecipeLoadError::NoRegistry {
            name: name.to_string(),
        });
    };
    let files = registry_files(&reg);
    let found = registry::lookup(&files, &reg, name)?;
    load_file(&found.path, Some(&reg), Some(&found.sub), input)
}

/// The layout of the registry clone at `dir`.
pub fn open_registry(dir: &Path) -> Result<RecipeRegistry, RecipeLoadError> {
    let err = |cause: String| RecipeLoadError::Registry {
        path: dir.display().to_string(),
        cause,
    };
    if !dir.is_dir() {
        return Err(err("not a folder (give the folder of a local clone)".into()));
    }
    let manifest = dir.join(MANIFEST);
    if manifest.is_file() {
        let text = std::fs::read_to_string(&manifest)
            .map_err(|e| err(format!("cannot read {MANIFEST}: {e}")))?;
        return RecipeRegistry::from_manifest(dir, &text).map_err(err);
    }
    Ok(RecipeRegistry::without_manifest(
        dir,
        dir.join("recipes").is_dir(),
    ))
}

/// Every recipe file of the registry (`*.yaml`/`*.yml`, recursively; hidden folders and
/// other files skipped), sorted by sub-registry and path.
pub fn registry_files(reg: &RecipeRegistry) -> Vec<RegistryFile> {
    let mut out = Vec::new();
    for sub in &reg.subs {
        let mut stack = vec![sub.recipes.clone()];
        let mut found: Vec<PathBuf> = Vec::new();
        while let Some(dir) = stack.pop() {
            let Ok(entries) = std::fs::read_dir(&dir) else {
                continue;
            };
            for e in entries.flatten() {
                let p = e.path();
                let hidden = p
                    .file_name()
                    .and_then(|n| n.to_str())
                    .is_some_and(|n| n.starts_with('.'));
                if hidden {
                    continue;
                }
                if p.is_dir() {
                    // The registry root may hold the recipes; its mods folder holds none.
                    if sub.mods.as_ref() != Some(&p) {
                        stack.push(p);
                    }
                } else if p.extension().is_some_and(|x| x == "yaml" || x == "yml") {
                    found.push(p);
                }
            }
        }
        found.sort();
        out.extend(found.into_iter().map(|path| {
            RegistryFile {
                sub: sub.name.clone(),
                name: path
                    .file_stem()
                    .and_then(|s| s.to_str())
                    .unwrap_or_default()
                    .to_string(),
                path,
            }
        }));
    }
    out
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

/// Every recipe of the registry at `dir`, each read with `input`.
pub fn list(dir: &Path, input: &RecipeInput) -> Result<Vec<RegistryEntry>, RecipeLoadError> {
    let reg = open_registry(dir)?;
    let files = registry_files(&reg);
    Ok(files
        .into_iter()
        .map(|file| {
            let hidden = reg.sub(&file.sub).is_some_and(|s| !s.visible);
            let (launch, problems) = match load_file(&file.path, Some(&reg), Some(&file.sub), input)
            {
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
            .find(|p| p.is_dir() && p.join("run.sh").is_file());
        let Some(folder) = hit else {
            let looked: Vec<String> = candidates
                .iter()
                .map(|p| {
                    if p.is_dir() {
                        format!("{} (no run.sh)", p.display())
                    } else {
                        p.display().to_string()
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
        let files = registry_files(&reg);
        assert_eq!(files.len(), 1);
        assert_eq!(
            (files[0].sub.as_str(), files[0].name.as_str()),
            ("official", "q")
        );
        let l = load("q", Some(t.path()), &RecipeInput::default()).unwrap();
        assert_eq!(l.mods[0].folder, t.path().join("official-mods/fix-a"));
        let listed = list(t.path(), &RecipeInput::default()).unwrap();
        assert!(listed[0].launch.is_some(), "{:?}", listed[0].problems);
    }

    #[test]
    fn a_bare_name_without_a_registry_is_refused() {
        let e = load("no-such-recipe", None, &RecipeInput::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "\"no-such-recipe\" is not a recipe file, and no --registry DIR is given to look it up in"
        );
    }
}
