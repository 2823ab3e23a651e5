//! A local clone of a recipe registry: its layout and finding a recipe in it by name. A
//! sparkrun registry (spark-arena/recipe-registry) says its layout in `.sparkrun/registry.yaml`
//! — `registries:`, each with a `name`, a `recipes` folder (recipe files, searched
//! recursively), an optional `mods` folder and `visible` — and a recipe's name is its file
//! name without `.yaml`; `@NAME/recipe` picks one sub-registry. sparkrun lays its built-in
//! registry list ([`SPARKRUN_BUILTIN`]) under what the manifests name, so a sub-registry of a
//! known repository that its manifest leaves out (dbotwinick/sparkrun-recipe-registry's
//! `sparkrun-transitional`) is still found by its name: a clone with a manifest gets the
//! built-in sub-registries of its repository that the manifest does not name. A folder without
//! that file is read as an eugr checkout (`recipes/` and `mods/`) or, lacking `recipes/`, as one
//! folder of recipe files. Pure: walking the folders is the loader's.

use std::path::{Component, Path, PathBuf};

use serde::Serialize;
use yaml_serde::Value;

/// One recipe collection inside a registry clone.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct SubRegistry {
    pub name: String,
    /// Folder of recipe files.
    pub recipes: PathBuf,
    /// Folder of shared mods.
    pub mods: Option<PathBuf>,
    /// `visible: false` sub-registries are found by name but listed as hidden.
    pub visible: bool,
}

/// A registry clone's layout.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RecipeRegistry {
    pub root: PathBuf,
    /// Whether `.sparkrun/registry.yaml` described it.
    pub manifest: bool,
    pub subs: Vec<SubRegistry>,
}

/// Where a registry says its layout.
pub const MANIFEST: &str = ".sparkrun/registry.yaml";

/// One sub-registry of sparkrun's built-in registry list: a folder of a repository it knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BuiltinRegistry {
    /// The repository, as [`repo_of_url`] spells it (`github.com/owner/name`, lower case).
    pub repo: &'static str,
    /// The name sparkrun gives it (`@NAME/recipe`).
    pub name: &'static str,
    /// Its recipes folder inside the repository.
    pub recipes: &'static str,
    /// Its shared mods folder, when it has one.
    pub mods: Option<&'static str>,
    /// Listed by default (`false`: found by name, listed as hidden).
    pub visible: bool,
}

/// sparkrun's built-in registries (what it falls back to, and lays under the manifests it
/// discovers: an entry a manifest names is the manifest's), as facts about where each
/// repository keeps which recipes.
pub const SPARKRUN_BUILTIN: [BuiltinRegistry; 7] = [
    BuiltinRegistry {
        repo: "github.com/dbotwinick/sparkrun-recipe-registry",
        name: "sparkrun-testing",
        recipes: "testing/recipes",
        mods: None,
        visible: false,
    },
    BuiltinRegistry {
        repo: "github.com/spark-arena/recipe-registry",
        name: "official",
        recipes: "official-recipes",
        mods: None,
        visible: true,
    },
    BuiltinRegistry {
        repo: "github.com/eugr/spark-vllm-docker",
        name: "eugr",
        recipes: "recipes",
        mods: Some("mods"),
        visible: true,
    },
    BuiltinRegistry {
        repo: "github.com/dbotwinick/sparkrun-recipe-registry",
        name: "sparkrun-transitional",
        recipes: "transitional/recipes",
        mods: None,
        visible: true,
    },
    BuiltinRegistry {
        repo: "github.com/spark-arena/recipe-registry",
        name: "experimental",
        recipes: "experimental-recipes",
        mods: None,
        visible: false,
    },
    BuiltinRegistry {
        repo: "github.com/spark-arena/community-recipe-registry",
        name: "community",
        recipes: "recipes",
        mods: None,
        visible: false,
    },
    BuiltinRegistry {
        repo: "github.com/avarok-cybersecurity/atlas-recipes",
        name: "atlas",
        recipes: "recipes",
        mods: None,
        visible: false,
    },
];

/// A git URL's repository as `host/owner/name`, lower case, without `.git` (`https://…`,
/// `ssh://git@…`, `git@host:owner/name`); `None` for what is not such a URL.
pub fn repo_of_url(url: &str) -> Option<String> {
    let url = url.trim().trim_end_matches('/');
    let rest = match url.split_once("://") {
        Some((_, rest)) => rest.to_string(),
        None => {
            let (host, path) = url.split_once(':')?;
            format!("{host}/{path}")
        }
    };
    let rest = rest.rsplit_once('@').map_or(rest.as_str(), |(_, r)| r);
    let rest = rest.trim_end_matches(".git").to_lowercase();
    let mut parts = rest.split('/').filter(|p| !p.is_empty());
    let host = parts.next()?;
    let host = host.split(':').next().unwrap_or(host);
    let (owner, name) = (parts.next()?, parts.next()?);
    if parts.next().is_some() {
        return None;
    }
    Some(format!("{host}/{owner}/{name}"))
}

impl RecipeRegistry {
    /// The layout a manifest describes.
    pub fn from_manifest(root: &Path, text: &str) -> Result<RecipeRegistry, String> {
        let doc: Value = crate::yaml::read(text)
            .map_err(|e| format!("{MANIFEST}: not valid YAML: {e}"))?
            .value;
        let entries = doc
            .get("registries")
            .and_then(Value::as_sequence)
            .ok_or_else(|| format!("{MANIFEST}: no `registries:` list"))?;
        let mut subs = Vec::new();
        for (i, e) in entries.iter().enumerate() {
            let text = |keys: &[&str]| {
                keys.iter()
                    .find_map(|k| e.get(*k).and_then(Value::as_str))
                    .map(str::to_string)
            };
            let name = text(&["name"])
                .ok_or_else(|| format!("{MANIFEST}: registries[{i}] has no name"))?;
            let recipes = text(&["recipes", "subpath"]).unwrap_or_else(|| "recipes".into());
            let mods = text(&["mods", "mods_subpath"]).filter(|m| !m.is_empty());
            subs.push(SubRegistry {
                recipes: inside(root, &recipes)
                    .map_err(|why| format!("{MANIFEST}: registries[{i}].recipes: {why}"))?,
                mods: mods
                    .map(|m| inside(root, &m))
                    .transpose()
                    .map_err(|why| format!("{MANIFEST}: registries[{i}].mods: {why}"))?,
                visible: e.get("visible").and_then(Value::as_bool).unwrap_or(true),
                name,
            });
        }
        Ok(RecipeRegistry {
            root: root.to_path_buf(),
            manifest: true,
            subs,
        })
    }

    /// The layout of a folder without a manifest: an eugr checkout when it has `recipes/`,
    /// else the folder itself holds the recipes.
    pub fn without_manifest(root: &Path, has_recipes_dir: bool) -> RecipeRegistry {
        let recipes = if has_recipes_dir {
            root.join("recipes")
        } else {
            root.to_path_buf()
        };
        RecipeRegistry {
            root: root.to_path_buf(),
            manifest: false,
            subs: vec![SubRegistry {
                name: root
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or("recipes")
                    .to_string(),
                recipes,
                mods: Some(root.join("mods")),
                visible: true,
            }],
        }
    }

    /// A clone without a manifest is one sub-registry: named `name` (it was kept so).
    pub fn named(mut self, name: Option<&str>) -> RecipeRegistry {
        if let (false, Some(name), [sub]) = (self.manifest, name, self.subs.as_mut_slice()) {
            sub.name = name.to_string();
        }
        self
    }

    /// A sub-registry by name.
    pub fn sub(&self, name: &str) -> Option<&SubRegistry> {
        self.subs.iter().find(|s| s.name == name)
    }

    /// The repository sparkrun knows this clone as: the one it was cloned from (`source`, a
    /// git URL), else the one whose built-in sub-registries its manifest names. Only a clone
    /// with a manifest: a folder without one is a single sub-registry already.
    pub fn known_repo(&self, source: Option<&str>) -> Option<&'static str> {
        if !self.manifest {
            return None;
        }
        let by_url = source.and_then(repo_of_url).and_then(|repo| {
            SPARKRUN_BUILTIN
                .iter()
                .find(|b| b.repo == repo)
                .map(|b| b.repo)
        });
        by_url.or_else(|| {
            self.subs.iter().find_map(|s| {
                SPARKRUN_BUILTIN
                    .iter()
                    .find(|b| b.name == s.name)
                    .map(|b| b.repo)
            })
        })
    }

    /// sparkrun's built-in sub-registries of this clone's repository ([`Self::known_repo`])
    /// that its manifest does not name, as sparkrun lays them under the manifest's.
    pub fn builtin_missing(&self, source: Option<&str>) -> Vec<BuiltinRegistry> {
        let Some(repo) = self.known_repo(source) else {
            return Vec::new();
        };
        SPARKRUN_BUILTIN
            .iter()
            .filter(|b| b.repo == repo && self.sub(b.name).is_none())
            .copied()
            .collect()
    }

    /// The same layout with the built-in sub-registry `b` added (its folders inside the clone).
    pub fn with_builtin(mut self, b: &BuiltinRegistry) -> Result<RecipeRegistry, String> {
        let recipes = inside(&self.root, b.recipes)?;
        let mods = b.mods.map(|m| inside(&self.root, m)).transpose()?;
        self.subs.push(SubRegistry {
            name: b.name.to_string(),
            recipes,
            mods,
            visible: b.visible,
        });
        Ok(self)
    }
}

/// A manifest path, kept inside the clone.
fn inside(root: &Path, rel: &str) -> Result<PathBuf, String> {
    let p = Path::new(rel);
    if p.is_absolute() || p.components().any(|c| c == Component::ParentDir) {
        return Err(format!("{rel:?} is not a folder inside the registry"));
    }
    Ok(root.join(p))
}

/// A registry's folder, and the name it was kept under (`spark-launch registry add --name`):
/// a clone without a manifest is one sub-registry, named so (else after its folder).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RegistryDir {
    pub path: PathBuf,
    pub name: Option<String>,
    /// The git URL it was cloned from (a kept registry's source), which names the repository
    /// sparkrun may know it as.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
}

impl RegistryDir {
    /// A folder given with `--registry DIR`.
    pub fn given(path: PathBuf) -> Self {
        RegistryDir {
            path,
            name: None,
            source: None,
        }
    }
}

/// A recipe file found in a registry.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RegistryFile {
    /// Which of the registries searched holds it (their order).
    #[serde(skip)]
    pub registry: usize,
    /// The sub-registry it is in.
    pub sub: String,
    /// The folders between the sub-registry's recipes folder and the file (`3x-spark-cluster`),
    /// empty for a file directly in it.
    pub folder: String,
    /// The file name without `.yaml`/`.yml`.
    pub name: String,
    pub path: PathBuf,
}

impl RegistryFile {
    /// The name that picks this file alone: `@SUB/NAME`, or `@SUB/FOLDER/NAME` below the top.
    pub fn qualified(&self) -> String {
        if self.folder.is_empty() {
            format!("@{}/{}", self.sub, self.name)
        } else {
            format!("@{}/{}/{}", self.sub, self.folder, self.name)
        }
    }
}

/// Why a name finds no single recipe.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum RegistryLookupError {
    #[error("no recipe {wanted:?} in {root} ({count} recipes){}", if near.is_empty() { String::new() } else { format!("; similar: {}", near.join(", ")) })]
    NotFound {
        wanted: String,
        root: String,
        count: usize,
        near: Vec<String>,
    },
    #[error("{wanted:?} names {} recipes: {}; pick one by the name given before its path", found.len(), found.join(", "))]
    Ambiguous { wanted: String, found: Vec<String> },
}

/// The recipe `wanted` names (`NAME`, `NAME.yaml`, `@SUB/NAME`, `@SUB/FOLDER/NAME`) among `files`
/// of the registries at `roots`. A bare name is looked for in the visible sub-registries first,
/// then in the hidden ones (`hidden` says which sub-registries those are), and a file directly
/// in a recipes folder is taken before files of the same name in folders below it, as sparkrun
/// does: its flat lookup comes first and the search of sub-folders only when it finds nothing.
pub fn lookup<'f>(
    files: &'f [RegistryFile],
    roots: &str,
    hidden: &dyn Fn(&RegistryFile) -> bool,
    wanted: &str,
) -> Result<&'f RegistryFile, RegistryLookupError> {
    let bare = wanted.trim_end_matches(".yaml").trim_end_matches(".yml");
    let (sub, path) = match bare.strip_prefix('@').and_then(|s| s.split_once('/')) {
        Some((sub, rest)) => (Some(sub), rest),
        None => (None, bare),
    };
    let (folder, name) = match path.rsplit_once('/') {
        Some((folder, name)) => (Some(folder), name),
        None => (None, path),
    };
    let all: Vec<&RegistryFile> = files
        .iter()
        .filter(|f| {
            f.name == name && sub.is_none_or(|s| s == f.sub) && folder.is_none_or(|d| d == f.folder)
        })
        .collect();
    let visible: Vec<&RegistryFile> = all.iter().copied().filter(|f| !hidden(f)).collect();
    let mut hits = if sub.is_none() && !visible.is_empty() {
        visible
    } else {
        all
    };
    if hits.iter().any(|f| f.folder.is_empty()) {
        hits.retain(|f| f.folder.is_empty());
    }
    match hits.as_slice() {
        [one] => Ok(one),
        [] => {
            let mut near: Vec<String> = files
                .iter()
                .filter(|f| f.name.contains(name) || name.contains(&f.name))
                .map(RegistryFile::qualified)
                .collect();
            near.truncate(5);
            Err(RegistryLookupError::NotFound {
                wanted: wanted.to_string(),
                root: roots.to_string(),
                count: files.len(),
                near,
            })
        }
        many => Err(RegistryLookupError::Ambiguous {
            wanted: wanted.to_string(),
            found: many
                .iter()
                .map(|f| format!("{} ({})", f.qualified(), f.path.display()))
                .collect(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MANIFEST_TEXT: &str = "registries:
  - name: official
    recipes: official-recipes
    mods: official-mods
  - name: experimental
    recipes: experimental-recipes
    visible: false
";

    fn file(sub: &str, name: &str) -> RegistryFile {
        RegistryFile {
            registry: 0,
            sub: sub.into(),
            folder: String::new(),
            name: name.into(),
            path: PathBuf::from(format!("/r/{sub}/{name}.yaml")),
        }
    }

    fn nested(sub: &str, folder: &str, name: &str) -> RegistryFile {
        RegistryFile {
            folder: folder.into(),
            path: PathBuf::from(format!("/r/{sub}/{folder}/{name}.yaml")),
            ..file(sub, name)
        }
    }

    #[test]
    fn a_manifest_names_each_sub_registry_and_its_folders() {
        let reg = RecipeRegistry::from_manifest(Path::new("/r"), MANIFEST_TEXT).unwrap();
        assert_eq!(reg.subs.len(), 2);
        assert_eq!(reg.subs[0].recipes, PathBuf::from("/r/official-recipes"));
        assert_eq!(reg.subs[0].mods, Some(PathBuf::from("/r/official-mods")));
        assert_eq!(reg.subs[1].mods, None);
        assert!(!reg.subs[1].visible);
    }

    #[test]
    fn a_bare_name_takes_the_visible_registry_s_recipe_before_a_hidden_one() {
        let files = [file("official", "qwen-a"), file("experimental", "qwen-a")];
        let hidden = |f: &RegistryFile| f.sub == "experimental";
        assert_eq!(
            lookup(&files, "/r", &hidden, "qwen-a").unwrap().sub,
            "official"
        );
        let only_hidden = [file("atlas", "qwen-b")];
        let hidden = |f: &RegistryFile| f.sub == "atlas";
        assert_eq!(
            lookup(&only_hidden, "/r", &hidden, "qwen-b").unwrap().sub,
            "atlas"
        );
    }

    #[test]
    fn git_urls_name_their_repository_however_they_are_spelled() {
        for url in [
            "https://github.com/dbotwinick/sparkrun-recipe-registry.git",
            "https://github.com/DBotwinick/sparkrun-recipe-registry/",
            "git@github.com:dbotwinick/sparkrun-recipe-registry.git",
            "ssh://git@github.com:22/dbotwinick/sparkrun-recipe-registry",
        ] {
            assert_eq!(
                repo_of_url(url).as_deref(),
                Some("github.com/dbotwinick/sparkrun-recipe-registry"),
                "{url}"
            );
        }
        assert_eq!(repo_of_url("/home/me/recipes"), None);
    }

    #[test]
    fn a_known_repository_s_manifest_gets_the_built_in_sub_registries_it_leaves_out() {
        // dbotwinick/sparkrun-recipe-registry's manifest names only sparkrun-testing.
        let testing_only = "registries:\n  - name: sparkrun-testing\n    recipes: testing/recipes\n    visible: false\n";
        let reg = RecipeRegistry::from_manifest(Path::new("/r"), testing_only).unwrap();
        let missing = reg.builtin_missing(None);
        let names: Vec<&str> = missing.iter().map(|b| b.name).collect();
        assert_eq!(names, ["sparkrun-transitional"]);
        let reg = reg.with_builtin(&missing[0]).unwrap();
        let sub = reg.sub("sparkrun-transitional").unwrap();
        assert_eq!(sub.recipes, PathBuf::from("/r/transitional/recipes"));
        assert!(sub.visible);
        // Known by the URL it was cloned from too, whatever its manifest names.
        let other = "registries:\n  - name: mine\n    recipes: testing/recipes\n";
        let reg = RecipeRegistry::from_manifest(Path::new("/r"), other).unwrap();
        assert!(reg.builtin_missing(None).is_empty());
        let by_url = reg.builtin_missing(Some(
            "https://github.com/dbotwinick/sparkrun-recipe-registry.git",
        ));
        let names: Vec<&str> = by_url.iter().map(|b| b.name).collect();
        assert_eq!(names, ["sparkrun-testing", "sparkrun-transitional"]);
        // A manifest that names every built-in of its repository gets none; a folder without
        // a manifest is one sub-registry already.
        let arena = RecipeRegistry::from_manifest(Path::new("/r"), MANIFEST_TEXT).unwrap();
        assert!(arena.builtin_missing(None).is_empty());
        let eugr = RecipeRegistry::without_manifest(Path::new("/clone"), true);
        assert!(
            eugr.builtin_missing(Some("https://github.com/eugr/spark-vllm-docker"))
                .is_empty()
        );
    }

    #[test]
    fn a_manifest_may_not_point_outside_the_clone() {
        let e = RecipeRegistry::from_manifest(
            Path::new("/r"),
            "registries:\n  - name: x\n    recipes: ../etc\n",
        )
        .unwrap_err();
        assert!(e.contains("not a folder inside the registry"), "{e}");
    }

    #[test]
    fn a_folder_without_manifest_is_an_eugr_checkout_or_a_folder_of_recipes() {
        let eugr = RecipeRegistry::without_manifest(Path::new("/clone"), true);
        assert_eq!(eugr.subs[0].recipes, PathBuf::from("/clone/recipes"));
        assert_eq!(eugr.subs[0].mods, Some(PathBuf::from("/clone/mods")));
        let flat = RecipeRegistry::without_manifest(Path::new("/mine"), false);
        assert_eq!(flat.subs[0].recipes, PathBuf::from("/mine"));
    }

    #[test]
    fn a_recipe_is_found_by_name_or_scoped_name_and_ambiguity_is_named() {
        let files = [
            file("official", "qwen-a"),
            file("experimental", "qwen-a"),
            file("official", "glm"),
        ];
        assert_eq!(
            lookup(&files, "/r", &|_| false, "glm.yaml").unwrap().sub,
            "official"
        );
        assert_eq!(
            lookup(&files, "/r", &|_| false, "@experimental/qwen-a")
                .unwrap()
                .sub,
            "experimental"
        );
        assert!(matches!(
            lookup(&files, "/r", &|_| false, "qwen-a"),
            Err(RegistryLookupError::Ambiguous { .. })
        ));
        let e = lookup(&files, "/r", &|_| false, "qwen").unwrap_err();
        assert_eq!(
            e.to_string(),
            "no recipe \"qwen\" in /r (3 recipes); similar: @official/qwen-a, @experimental/qwen-a"
        );
    }

    #[test]
    fn a_recipe_at_the_top_of_a_recipes_folder_is_taken_before_same_named_ones_below_it() {
        // eugr's registry holds qwen3.5-397b-int4-autoround.yaml at the top and again in
        // 3x-spark-cluster/ and 4x-spark-cluster/.
        let files = [
            file("eugr", "qwen-big"),
            nested("eugr", "3x-spark-cluster", "qwen-big"),
            nested("eugr", "4x-spark-cluster", "qwen-big"),
        ];
        let top = lookup(&files, "/r", &|_| false, "@eugr/qwen-big").unwrap();
        assert_eq!(top.folder, "");
        let three = lookup(&files, "/r", &|_| false, "@eugr/3x-spark-cluster/qwen-big").unwrap();
        assert_eq!(three.folder, "3x-spark-cluster");
    }

    #[test]
    fn same_named_recipes_only_below_the_top_are_ambiguous_and_the_error_names_each_one_s_full_name()
     {
        let files = [
            nested("eugr", "3x-spark-cluster", "qwen-big"),
            nested("eugr", "4x-spark-cluster", "qwen-big"),
        ];
        let e = lookup(&files, "/r", &|_| false, "qwen-big").unwrap_err();
        let text = e.to_string();
        assert!(text.contains("@eugr/3x-spark-cluster/qwen-big ("), "{text}");
        assert!(text.contains("@eugr/4x-spark-cluster/qwen-big ("), "{text}");
        let picked = lookup(&files, "/r", &|_| false, "@eugr/4x-spark-cluster/qwen-big").unwrap();
        assert_eq!(picked.folder, "4x-spark-cluster");
    }
}
