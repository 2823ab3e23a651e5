//! Mods: a mod is a folder with a `run.sh` (and the files it uses) that runs in every container
//! before the engine. A recipe names them (`mods/fix-x`, `fix-x`, `@official/fix-x`); this
//! says, in order, every folder a name may be: next to the recipe (`<dir>/<ref>`,
//! `<dir>/mods/<name>`), in an eugr checkout the recipe sits in (`<root>/mods/<name>` above
//! its `recipes/` folder; not inside a sparkrun registry), and in the registry's mods folders
//! (the recipe's own sub-registry first), then, as sparkrun falls back, in eugr's registry among
//! every registry given or kept (`@NAME/…` looks in the named sub-registry of any of them) — each
//! with the tree the mod must stay inside: the
//! registry clone or the checkout it is found in, or the recipe's own folder for a mod next
//! to a recipe outside a registry. Registries are git clones and git stores links: a mod whose folder or file leads
//! out of that tree (to `~/.ssh`) would carry the user's files into every container, so the
//! loader refuses it; an absolute mod path in a registry's or checkout's recipe is refused
//! here. Checking which folder exists is the loader's job; a name none of them holds is
//! refused naming every place looked. Pure.

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
    /// The tree every file of the mod must stay inside (links resolved).
    #[serde(skip)]
    pub within: PathBuf,
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
    /// Every other registry given or kept, in order: `@NAME/…` names one of their
    /// sub-registries, and the eugr one is the last place a mod is looked for.
    pub others: &'a [RecipeRegistry],
}

impl ModSearch<'_> {
    /// The tree a mod next to the recipe must stay in: the registry clone the recipe sits in,
    /// else the recipe's own folder (not the folder above a `recipes/` folder, which may be
    /// the user's home when a clone is named `recipes`).
    fn recipe_tree(&self) -> Option<PathBuf> {
        let dir = self.recipe_dir?;
        if let Some(reg) = self.registry.filter(|r| dir.starts_with(&r.root)) {
            return Some(reg.root.clone());
        }
        Some(dir.to_path_buf())
    }

    /// Whether the recipe comes from a registry clone or a checkout, not the user's own hand.
    fn cloned_from_elsewhere(&self) -> bool {
        self.own.is_some()
            || self.recipe_dir.is_some_and(|dir| {
                eugr_root(dir).is_some() || self.registry.is_some_and(|r| dir.starts_with(&r.root))
            })
    }
}

/// A folder a mod may be, and the tree it must stay inside.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModPlace {
    pub folder: PathBuf,
    pub within: PathBuf,
}

/// Every folder `reference` may name, most specific first, without repeats.
pub fn candidates(reference: &str, search: &ModSearch) -> Result<Vec<ModPlace>, String> {
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
    let mut out: Vec<ModPlace> = Vec::new();
    if let Some(scoped) = reference.strip_prefix('@') {
        let (registry_name, rel) = scoped.split_once('/').unwrap_or((scoped, ""));
        let all: Vec<&RecipeRegistry> = search.registry.into_iter().chain(search.others).collect();
        if all.is_empty() {
            return Err(format!(
                "{reference:?} names registry @{registry_name}; give it with --registry DIR or keep it with `spark-launch registry add`"
            ));
        }
        let found = all.iter().find_map(|reg| {
            let mods = reg.sub(registry_name)?.mods.as_ref()?;
            Some(ModPlace {
                folder: mods.join(strip_mods(rel)),
                within: reg.root.clone(),
            })
        });
        let Some(place) = found else {
            return Err(format!(
                "{reference:?}: no registry given or kept has a sub-registry @{registry_name} with a mods folder"
            ));
        };
        out.push(place);
        return Ok(out);
    }
    if Path::new(reference).is_absolute() {
        if search.cloned_from_elsewhere() {
            return Err(format!(
                "{reference:?} is an absolute path: a recipe from a registry or checkout names its mods inside it, never a folder of this machine"
            ));
        }
        return Ok(vec![ModPlace {
            folder: PathBuf::from(reference),
            within: PathBuf::from(reference),
        }]);
    }
    let name = strip_mods(reference);
    if let (Some(dir), Some(tree)) = (search.recipe_dir, search.recipe_tree()) {
        let place = |folder: PathBuf| ModPlace {
            folder,
            within: tree.clone(),
        };
        out.push(place(dir.join(reference)));
        out.push(place(dir.join("mods").join(name)));
        // eugr's layout, for a recipe read outside a sparkrun registry.
        let in_manifest_registry = search.registry.is_some_and(|r| r.manifest);
        if let Some(root) = eugr_root(dir).filter(|_| !in_manifest_registry) {
            out.push(ModPlace {
                folder: root.join(reference),
                within: root.to_path_buf(),
            });
            out.push(ModPlace {
                folder: root.join("mods").join(name),
                within: root.to_path_buf(),
            });
        }
    }
    if let Some(reg) = search.registry {
        let own = search.own.and_then(|o| reg.sub(o));
        let subs = own.into_iter().chain(reg.subs.iter());
        let place = |folder: PathBuf| ModPlace {
            folder,
            within: reg.root.clone(),
        };
        for mods in subs.filter_map(|s| s.mods.as_ref()) {
            out.push(place(mods.join(name)));
        }
        out.push(place(reg.root.join("mods").join(name)));
    }
    // Last, as sparkrun falls back: the eugr registry's mods (a sub-registry named `eugr`, or
    // a clone laid out as eugr's checkout), wherever the recipe came from.
    for reg in search.others.iter().chain(search.registry) {
        if let Some(mods) = eugr_mods(reg) {
            out.push(ModPlace {
                folder: mods.join(name),
                within: reg.root.clone(),
            });
        }
    }
    let mut seen = Vec::new();
    out.retain(|p| {
        let fresh = !seen.contains(&p.folder);
        seen.push(p.folder.clone());
        fresh
    });
    Ok(out)
}

/// The mods folder of eugr's registry, when `reg` is it: a sub-registry named `eugr`, or a
/// clone without a manifest laid out as eugr's checkout (`recipes/` beside `mods/`).
fn eugr_mods(reg: &RecipeRegistry) -> Option<&Path> {
    let named = reg.sub("eugr").and_then(|s| s.mods.as_deref());
    let checkout = (!reg.manifest)
        .then(|| reg.subs.first())
        .flatten()
        .filter(|s| s.recipes == reg.root.join("recipes"))
        .and_then(|s| s.mods.as_deref());
    named.or(checkout)
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

    fn paths(v: Vec<ModPlace>) -> Vec<String> {
        v.into_iter()
            .map(|p| p.folder.display().to_string())
            .collect()
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
            others: &[],
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
                .contains("has a sub-registry @nope with a mods folder")
        );
        assert!(
            candidates("@official/x", &ModSearch::default())
                .unwrap_err()
                .contains("--registry DIR")
        );
    }

    #[test]
    fn each_place_names_the_tree_its_mod_must_stay_in_and_a_clone_names_no_absolute_path() {
        let reg = registry();
        let search = ModSearch {
            recipe_dir: Some(Path::new("/reg/official-recipes/q")),
            registry: Some(&reg),
            own: Some("official"),
            others: &[],
        };
        let places = candidates("fix-x", &search).unwrap();
        assert!(places.iter().all(|p| p.within == Path::new("/reg")));
        let e = candidates("/home/u/.ssh", &search).unwrap_err();
        assert!(e.contains("is an absolute path"), "{e}");
        let eugr = ModSearch {
            recipe_dir: Some(Path::new("/clone/recipes/2x")),
            ..ModSearch::default()
        };
        assert!(candidates("/home/u/.ssh", &eugr).is_err());
        let within: Vec<String> = candidates("fix-glm", &eugr)
            .unwrap()
            .into_iter()
            .map(|p| p.within.display().to_string())
            .collect();
        assert_eq!(
            within,
            ["/clone/recipes/2x", "/clone/recipes/2x", "/clone", "/clone"]
        );
        // A recipe of the user's own may name a folder of this machine: that folder is its tree.
        let mine = ModSearch {
            recipe_dir: Some(Path::new("/home/u/r")),
            ..ModSearch::default()
        };
        assert_eq!(
            candidates("/opt/mods/fix", &mine).unwrap(),
            [ModPlace {
                folder: PathBuf::from("/opt/mods/fix"),
                within: PathBuf::from("/opt/mods/fix")
            }]
        );
        assert!(
            candidates("fix", &mine)
                .unwrap()
                .iter()
                .all(|p| p.within == Path::new("/home/u/r"))
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
