//! Mods: a mod is a folder with a `run.sh` (and the files it uses) that runs in every container
//! before the engine. A recipe names them (`mods/fix-x`, `fix-x`, `@official/fix-x`); this
//! says, in order, every folder a name may be: next to the recipe (`<dir>/<ref>`,
//! `<dir>/mods/<name>`), in an eugr checkout the recipe sits in (`<root>/mods/<name>` above
//! its `recipes/` folder; not inside a sparkrun registry), and in the registry's mods folders (the recipe's own sub-registry
//! first). Checking which exists is the loader's job; a name none of them holds is refused
//! naming every place looked. Pure.

use std::path::{Component, Path, PathBuf};

use serde::Serialize;

use super::registry::RecipeRegistry;
pub use crate::workload::recipe_part::{ModFile, ModFiles};

/// A mod resolved to its folder.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RecipeMod {
    /// The folder name: the mod lands at `/workspace/mods/<name>` in the container.
    pub name: String,
    /// As the recipe wrote it.
    pub reference: String,
    pub folder: PathBuf,
}

/// A mod name that is a folder name and a shell word at once (letters, digits, `.`, `_`, `-`):
/// the name is a path in the container and a word of the script that runs it.
pub fn plain_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Where mods are looked for.
#[derive(Clone, Copy, Debug, Default)]
pub struct ModSearch<'a> {
    /// The folder of the recipe file.
    pub recipe_dir: Option<&'a Path>,
    pub registry: Option<&'a RecipeRegistry>,
    /// The sub-registry the recipe came from.
    pub own: Option<&'a str>,
}

/// Every folder `reference` may name, most specific first, without repeats.
pub fn candidates(reference: &str, search: &ModSearch) -> Result<Vec<PathBuf>, String> {
    let reference = reference.trim();
    if reference.is_empty() {
        return Err("an empty mod name".into());
    }
    if Path::new(reference)
        .components()
        .any(|c| c == Component::ParentDir)
    {
        return Err(format!(
            "{reference:?} climbs out of the recipe's folders with `..`; name the mod by its folder"
        ));
    }
    let mut out: Vec<PathBuf> = Vec::new();
    if let Some(scoped) = reference.strip_prefix('@') {
        let (registry_name, rel) = scoped.split_once('/').unwrap_or((scoped, ""));
        let Some(reg) = search.registry else {
            return Err(format!(
                "{reference:?} names registry @{registry_name}; give it with --registry DIR"
            ));
        };
        let Some(mods) = reg.sub(registry_name).and_then(|s| s.mods.as_ref()) else {
            return Err(format!(
                "{reference:?}: the registry {} has no sub-registry @{registry_name} with a mods folder",
                reg.root.display()
            ));
        };
        out.push(mods.join(strip_mods(rel)));
        return Ok(out);
    }
    if Path::new(reference).is_absolute() {
        return Ok(vec![PathBuf::from(reference)]);
    }
    let name = strip_mods(reference);
    if let Some(dir) = search.recipe_dir {
        out.push(dir.join(reference));
        out.push(dir.join("mods").join(name));
        // eugr's layout, for a recipe read outside a sparkrun registry.
        let in_manifest_registry = search.registry.is_some_and(|r| r.manifest);
        if let Some(root) = eugr_root(dir).filter(|_| !in_manifest_registry) {
            out.push(root.join(reference));
            out.push(root.join("mods").join(name));
        }
    }
    if let Some(reg) = search.registry {
        let own = search.own.and_then(|o| reg.sub(o));
        let subs = own.into_iter().chain(reg.subs.iter());
        for mods in subs.filter_map(|s| s.mods.as_ref()) {
            out.push(mods.join(name));
        }
        out.push(reg.root.join("mods").join(name));
    }
    let mut seen = Vec::new();
    out.retain(|p| {
        let fresh = !seen.contains(p);
        seen.push(p.clone());
        fresh
    });
    Ok(out)
}

/// `mods/fix-x` → `fix-x` (one leading `mods/`).
fn strip_mods(reference: &str) -> &str {
    reference
        .strip_prefix("mods/")
        .unwrap_or(reference)
        .trim_end_matches('/')
}

/// The checkout above a `recipes/` folder the recipe sits in (eugr's layout).
fn eugr_root(dir: &Path) -> Option<&Path> {
    dir.ancestors()
        .find(|a| a.file_name().is_some_and(|n| n == "recipes"))
        .and_then(Path::parent)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::recipe::registry::SubRegistry;

    fn registry() -> RecipeRegistry {
        RecipeRegistry {
            root: PathBuf::from("/reg"),
            manifest: true,
            subs: vec![
                SubRegistry {
                    name: "official".into(),
                    recipes: PathBuf::from("/reg/official-recipes"),
                    mods: Some(PathBuf::from("/reg/official-mods")),
                    visible: true,
                },
                SubRegistry {
                    name: "experimental".into(),
                    recipes: PathBuf::from("/reg/experimental-recipes"),
                    mods: Some(PathBuf::from("/reg/experimental-mods")),
                    visible: false,
                },
            ],
        }
    }

    fn paths(v: Vec<PathBuf>) -> Vec<String> {
        v.into_iter().map(|p| p.display().to_string()).collect()
    }

    #[test]
    fn a_mod_is_looked_for_next_to_the_recipe_then_in_the_eugr_checkout() {
        let dir = Path::new("/clone/recipes/4x-spark-cluster");
        let search = ModSearch {
            recipe_dir: Some(dir),
            ..ModSearch::default()
        };
        assert_eq!(
            paths(candidates("mods/fix-glm", &search).unwrap()),
            [
                "/clone/recipes/4x-spark-cluster/mods/fix-glm",
                "/clone/mods/fix-glm"
            ]
        );
        assert_eq!(
            paths(candidates("fix-glm", &search).unwrap()),
            [
                "/clone/recipes/4x-spark-cluster/fix-glm",
                "/clone/recipes/4x-spark-cluster/mods/fix-glm",
                "/clone/fix-glm",
                "/clone/mods/fix-glm",
            ]
        );
    }

    #[test]
    fn registry_mods_come_after_the_recipe_folder_own_sub_registry_first() {
        let reg = registry();
        let dir = Path::new("/reg/experimental-recipes/q");
        let search = ModSearch {
            recipe_dir: Some(dir),
            registry: Some(&reg),
            own: Some("experimental"),
        };
        assert_eq!(
            paths(candidates("fix-x", &search).unwrap()),
            [
                "/reg/experimental-recipes/q/fix-x",
                "/reg/experimental-recipes/q/mods/fix-x",
                "/reg/experimental-mods/fix-x",
                "/reg/official-mods/fix-x",
                "/reg/mods/fix-x",
            ]
        );
    }

    #[test]
    fn a_scoped_mod_names_one_sub_registry() {
        let reg = registry();
        let search = ModSearch {
            registry: Some(&reg),
            ..ModSearch::default()
        };
        assert_eq!(
            paths(candidates("@official/mods/fix-x", &search).unwrap()),
            ["/reg/official-mods/fix-x"]
        );
        assert!(
            candidates("@nope/fix-x", &search)
                .unwrap_err()
                .contains("no sub-registry @nope")
        );
        assert!(
            candidates("@official/x", &ModSearch::default())
                .unwrap_err()
                .contains("--registry DIR")
        );
    }

    #[test]
    fn parent_climbs_and_empty_names_are_refused() {
        assert!(
            candidates("../../etc", &ModSearch::default())
                .unwrap_err()
                .contains("`..`")
        );
        assert!(candidates(" ", &ModSearch::default()).is_err());
    }
}
