//! The code conventions a machine can check: every module says what it owns,
//! the pure core has no effects, and fan-out over nodes happens in one place.

use std::path::{Path, PathBuf};

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    if dir.is_file() {
        return vec![dir.to_path_buf()];
    }
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d)
            .expect("readable src")
            .filter_map(|e| e.ok())
        {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Source text without comments and string contents that could mention forbidden words.
fn code_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines()
        .map(str::trim_start)
        .filter(|l| !l.starts_with("//"))
}

#[test]
fn every_source_file_starts_with_a_module_doc_comment() {
    let missing: Vec<String> = rust_files(&src())
        .into_iter()
        .filter(|p| {
            let text = std::fs::read_to_string(p).unwrap_or_default();
            !text.trim_start().starts_with("//!")
        })
        .map(|p| p.display().to_string())
        .collect();
    assert!(
        missing.is_empty(),
        "files without a `//!` header saying what they own: {missing:#?}"
    );
}

#[test]
fn the_pure_core_imports_no_effects() {
    // derive, plan, workload, report's parsers and doctor's checks decide; so do fabric (the
    // cabling, address plan, netplan text and node scripts as text), model (names, manifests,
    // scripts as text), profile, compose, k8s (manifests as text), bench's statistics,
    // requests and comparisons, and
    // what a simulated cluster is (sim's plan and its rendering).
    // They never touch the world (doctor's
    // live observations are gathered by the CLI, judged here).
    let pure = [
        "derive",
        "check",
        "fabric",
        "plan",
        "workload",
        "report",
        "doctor",
        "model",
        "profile",
        "recipe",
        "compose.rs",
        "k8s",
        "libnccl",
        "bench/request.rs",
        "bench/measure.rs",
        "bench/compare.rs",
        "bench/soak.rs",
        "supervise/unit.rs",
        "supervise/machine.rs",
        "sim/plan.rs",
        "sim/render.rs",
    ];
    let forbidden = [
        "tokio",
        "bollard",
        "std::process",
        "std::net::TcpStream",
        "std::net::TcpListener",
        "std::net::UdpSocket",
        "std::fs::write",
        "std::fs::File",
        "reqwest",
        "crate::ssh",
        "crate::runtime",
        "crate::apply",
    ];
    let mut offenders = Vec::new();
    for dir in pure {
        for p in rust_files(&src().join(dir)) {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            // Unit tests may use anything.
            let body = text.split("#[cfg(test)]").next().unwrap_or("");
            for line in code_lines(body) {
                for f in forbidden {
                    if line.contains(f) {
                        offenders.push(format!("{}: {}", p.display(), line.trim()));
                    }
                }
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "effects in the pure core: {offenders:#?}"
    );
}

#[test]
fn fan_out_over_nodes_happens_only_in_the_one_helper() {
    let mut offenders = Vec::new();
    for p in rust_files(&src()) {
        if p.ends_with("node/fanout.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        for line in code_lines(&text) {
            if line.contains("join_all") || line.contains("try_join_all") {
                offenders.push(format!("{}: {}", p.display(), line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "use node::for_each_node instead: {offenders:#?}"
    );
}

#[test]
fn the_executors_phases_fan_out_only_through_the_apply_contexts_helper() {
    // `ApplyContext::each_node` (and `on_every_node` on top of it) is where the executor fans
    // out, with `--concurrency`: a phase never calls `for_each_node` itself.
    let mut offenders = Vec::new();
    for p in rust_files(&src().join("apply/phases")) {
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        for line in code_lines(&text) {
            if line.contains("for_each_node") {
                offenders.push(format!("{}: {}", p.display(), line.trim()));
            }
        }
    }
    let context = std::fs::read_to_string(src().join("apply/context.rs")).unwrap_or_default();
    let calls = code_lines(&context)
        .filter(|l| l.contains("for_each_node("))
        .count();
    assert_eq!(calls, 1, "apply/context.rs fans out once, in each_node");
    assert!(
        offenders.is_empty(),
        "use ctx.each_node / ctx.on_every_node instead: {offenders:#?}"
    );
}

#[test]
fn anyhow_is_used_only_at_the_edge() {
    let mut offenders = Vec::new();
    for p in rust_files(&src()) {
        let rel = p.strip_prefix(src()).unwrap_or(&p).to_path_buf();
        if rel.starts_with("cli") || rel == Path::new("main.rs") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        let body = text.split("#[cfg(test)]").next().unwrap_or("");
        for line in code_lines(body) {
            if line.contains("anyhow") {
                offenders.push(format!("{}: {}", p.display(), line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "library modules use thiserror: {offenders:#?}"
    );
}

/// Lines of non-test code under `rel` (a folder or file of src) that contain `needle`.
fn find(rel: &str, needle: &str) -> Vec<String> {
    let mut out = Vec::new();
    for p in rust_files(&src().join(rel)) {
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        let body = text.split("#[cfg(test)]").next().unwrap_or("");
        for line in code_lines(body) {
            if line.contains(needle) {
                out.push(format!("{}: {}", p.display(), line.trim()));
            }
        }
    }
    out
}

#[test]
fn ssh_never_imports_apply_and_the_executor_and_serving_do_not_import_each_other() {
    let mut offenders = find("ssh", "crate::apply");
    offenders.extend(find("apply/executor.rs", "serving"));
    offenders.extend(find("apply/serving.rs", "executor"));
    offenders.extend(find("runtime", "crate::apply"));
    assert!(offenders.is_empty(), "import cycles: {offenders:#?}");
}

#[test]
fn clap_lives_only_in_the_cli() {
    let offenders: Vec<String> = rust_files(&src())
        .into_iter()
        .filter(|p| {
            let rel = p.strip_prefix(src()).unwrap_or(p);
            !rel.starts_with("cli") && rel != Path::new("main.rs")
        })
        .flat_map(|p| {
            let text = std::fs::read_to_string(&p).unwrap_or_default();
            code_lines(&text)
                .filter(|l| l.contains("clap"))
                .map(|l| format!("{}: {}", p.display(), l.trim()))
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(
        offenders.is_empty(),
        "library types must not know the command line: {offenders:#?}"
    );
}

#[test]
fn nodes_are_resolved_in_one_place() {
    // What the user typed about nodes becomes nodes only in `resolve`: reading the cluster
    // file for a command, telling which configured node is this machine, reading snapshot
    // folders, and the connect-or-fail pool. (Editing the cluster file, `probe --root` of one
    // folder and the first contact of `trust`/`fabric` with passwords are not resolving.)
    let mut offenders = Vec::new();
    for p in rust_files(&src()) {
        let rel = p.strip_prefix(src()).unwrap_or(&p).to_path_buf();
        if rel.starts_with("resolve") {
            continue;
        }
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        let body = text.split("#[cfg(test)]").next().unwrap_or("");
        for line in code_lines(body) {
            let resolving = line.contains("inventory::load(")
                || (line.contains("is_this_machine(") && !line.contains("fn is_this_machine"))
                || line.contains("Pool::connect(")
                || (line.contains("read_snapshot_dir(")
                    && !rel.starts_with("probe")
                    && rel != Path::new("cli/cmd_probe.rs"));
            if resolving {
                offenders.push(format!("{}: {}", p.display(), line.trim()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "a second resolver; use resolve::resolve: {offenders:#?}"
    );
}

#[test]
fn every_public_type_name_is_used_once_across_the_crate() {
    // Two `Context`s or two `Verdict`s make a reader (and a search) guess which one a line
    // means. Public structs, enums, traits and type aliases each have one name in the crate;
    // private helpers inside one file and trait-associated types (`type Err`) are not counted.
    let mut seen: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for p in rust_files(&src()) {
        let text = std::fs::read_to_string(&p).unwrap_or_default();
        for line in code_lines(&text) {
            let Some(rest) = line.strip_prefix("pub ").or_else(|| {
                line.strip_prefix("pub(crate) ")
                    .or_else(|| line.strip_prefix("pub(super) "))
            }) else {
                continue;
            };
            let Some(rest) = ["struct ", "enum ", "trait ", "type "]
                .iter()
                .find_map(|kw| rest.strip_prefix(kw))
            else {
                continue;
            };
            let name: String = rest
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
                .collect();
            if !name.is_empty() {
                seen.entry(name).or_default().push(p.display().to_string());
            }
        }
    }
    let twice: Vec<_> = seen.into_iter().filter(|(_, at)| at.len() > 1).collect();
    assert!(
        twice.is_empty(),
        "public type names defined more than once (rename one for what it is): {twice:#?}"
    );
}

/// An engine's name as the seam spells it, and as an identifier might (`vllm`, `Vllm`, `VLLM`,
/// `llama_cpp` for `llama-cpp`): letters and digits, lowercased.
fn squashed(name: &str) -> String {
    name.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

/// The variants of every `enum` and the fields of every `struct` in `body`, one per line as
/// rustfmt writes them: `("enum Runner", "Vllm")`, `("struct Profile", "trtllm")`.
fn members(body: &str) -> Vec<(String, String)> {
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect()
    };
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in code_lines(body) {
        let line = line.trim();
        if let Some(item) = &current {
            if line.starts_with('}') {
                current = None;
            } else if !line.starts_with('#') {
                let member = ident(
                    line.trim_start_matches("pub(crate) ")
                        .trim_start_matches("pub "),
                );
                if !member.is_empty() {
                    out.push((item.clone(), member));
                }
            }
            continue;
        }
        let rest = line
            .trim_start_matches("pub(crate) ")
            .trim_start_matches("pub ");
        for kind in ["enum", "struct"] {
            if let Some(decl) = rest.strip_prefix(&format!("{kind} "))
                && line.ends_with('{')
            {
                current = Some(format!("{kind} {}", ident(decl)));
            }
        }
    }
    out
}

#[test]
fn nothing_outside_the_engine_seam_names_one_engine() {
    // Everything that differs by engine lives in `workload/engines/` (one file
    // per engine, registered in its mod.rs): program words and flag spellings of recipes,
    // runtime names, profile sections, ports, start order, readiness. The rest of the crate
    // asks the seam. Only the engines' own CLI subcommands (`cli/cmd_serve.rs`) name an
    // engine, to build its request. Naming one elsewhere — its variant, an enum of engines,
    // its name as a string matched on — is a `match` the compiler will not extend for the
    // next engine.
    use spark_launch::workload::engines::EngineKind;
    let names: Vec<String> = EngineKind::ALL.iter().map(|e| e.to_string()).collect();
    let squashed_names: Vec<String> = names.iter().map(|n| squashed(n)).collect();
    let mut offenders = Vec::new();
    let all = rust_files(&src());
    let test_only = test_only_files(&all);
    for p in &all {
        let rel = p.strip_prefix(src()).unwrap_or(p).to_path_buf();
        if rel.starts_with("workload/engines")
            || rel == Path::new("cli/cmd_serve.rs")
            || test_only.contains(p)
        {
            continue;
        }
        let text = std::fs::read_to_string(p).unwrap_or_default();
        let body = text.split("#[cfg(test)]").next().unwrap_or("");
        for line in code_lines(body) {
            let names_variant = line.match_indices("EngineKind::").any(|(i, m)| {
                line[i + m.len()..]
                    .chars()
                    .next()
                    .is_some_and(|c| c.is_ascii_uppercase())
                    && !line[i + m.len()..].starts_with("ALL")
            });
            let reaches_in = names.iter().any(|e| {
                line.contains(&format!("engines::{e}"))
                    || (line.contains("engines::{") && line.contains(e.as_str()))
            });
            let matches_name = names.iter().any(|e| {
                let lit = format!("\"{e}\"");
                [
                    format!("{lit} =>"),
                    format!("{lit} |"),
                    format!("| {lit}"),
                    format!("== {lit}"),
                    format!("{lit} =="),
                    format!("!= {lit}"),
                ]
                .iter()
                .any(|pattern| line.contains(pattern.as_str()))
            });
            if names_variant || reaches_in || matches_name {
                offenders.push(format!("{}: {}", p.display(), line.trim()));
            }
        }
        for (item, member) in members(body) {
            if squashed_names.contains(&squashed(&member)) {
                offenders.push(format!("{}: {item} lists the engine {member}", p.display()));
            }
        }
    }
    assert!(
        offenders.is_empty(),
        "ask the engine seam (workload::engines::ServingEngine) instead: {offenders:#?}"
    );
}

#[test]
fn the_engine_check_reads_the_variants_and_fields_of_every_type() {
    // The check above reads text; this is what it must find.
    let body = "pub enum Runner {\n    Vllm,\n    Sglang(u8),\n}\nenum Other { A }\n\
        struct Sections {\n    /// knobs\n    #[serde(default)]\n    pub trtllm: Option<u8>,\n}\n";
    assert_eq!(
        members(body),
        [
            ("enum Runner".to_string(), "Vllm".to_string()),
            ("enum Runner".to_string(), "Sglang".to_string()),
            ("struct Sections".to_string(), "trtllm".to_string()),
        ]
    );
    assert_eq!(squashed("llama-cpp"), squashed("LlamaCpp"));
}

#[test]
fn the_readme_opens_with_two_commands_that_work_as_written_in_a_root_shell() {
    // Seen once: `sudo scripts/test-all` failed in a root shell without sudo, and
    // `cargo install --path .` without `--locked` built newer crates than Cargo.lock pins.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    let start = readme.find("```sh\n").expect("a sh block at the top") + "```sh\n".len();
    let block = &readme[start..start + readme[start..].find("```").unwrap()];
    let lines: Vec<&str> = block.lines().collect();
    assert_eq!(lines.len(), 2, "{block}");
    assert!(
        lines[0].starts_with("cargo install --locked --path . && spark-launch "),
        "{}",
        lines[0]
    );
    assert_eq!(lines[1], "scripts/test-all");
    use std::os::unix::fs::PermissionsExt as _;
    let script = root.join(lines[1]);
    let mode = std::fs::metadata(&script).unwrap().permissions().mode();
    assert_ne!(mode & 0o111, 0, "{} is not executable", script.display());
    // Elsewhere than in a root shell it stops and says how to run it.
    let text = std::fs::read_to_string(&script).unwrap();
    assert!(text.contains("\"$(id -u)\" != 0"), "no root check");
    assert!(
        text.contains("(sudo scripts/test-all)"),
        "no non-root message"
    );
}

/// The files of `dir` that only tests compile: `#[cfg(test)] mod NAME;` in their parent.
fn test_only_files(files: &[PathBuf]) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for p in files {
        let text = std::fs::read_to_string(p).unwrap_or_default();
        let dir = if p.ends_with("mod.rs") || p.ends_with("lib.rs") {
            p.parent().map(Path::to_path_buf)
        } else {
            p.file_stem().and_then(|s| Some(p.parent()?.join(s)))
        };
        let Some(dir) = dir else { continue };
        let lines: Vec<&str> = text.lines().map(str::trim).collect();
        for w in lines.windows(2) {
            if w[0] != "#[cfg(test)]" {
                continue;
            }
            let Some(name) = w[1]
                .trim_start_matches("pub(crate) ")
                .trim_start_matches("pub ")
                .strip_prefix("mod ")
                .and_then(|r| r.strip_suffix(';'))
            else {
                continue;
            };
            out.push(dir.join(format!("{name}.rs")));
            out.push(dir.join(name).join("mod.rs"));
        }
    }
    out
}

/// The top-level modules (`src/NAME.rs` or `src/NAME/`) each one names in its non-test code
/// (`crate::NAME`, or `NAME` inside `use crate::{...}`).
fn module_imports() -> std::collections::BTreeMap<String, std::collections::BTreeSet<String>> {
    let all = rust_files(&src());
    let test_only = test_only_files(&all);
    let module_of = |p: &Path| -> Option<String> {
        let rel = p.strip_prefix(src()).ok()?;
        let first = rel.components().next()?.as_os_str().to_str()?;
        let name = first.strip_suffix(".rs").unwrap_or(first);
        (name != "lib" && name != "main").then(|| name.to_string())
    };
    let modules: std::collections::BTreeSet<String> =
        all.iter().filter_map(|p| module_of(p)).collect();
    let mut graph = std::collections::BTreeMap::new();
    for p in &all {
        let Some(from) = module_of(p) else { continue };
        if test_only.contains(p) {
            continue;
        }
        let text = std::fs::read_to_string(p).unwrap_or_default();
        let body = text.split("#[cfg(test)]").next().unwrap_or("");
        let code: String = code_lines(body).collect::<Vec<_>>().join("\n");
        let mut named = Vec::new();
        for (i, _) in code.match_indices("crate::") {
            let rest = &code[i + "crate::".len()..];
            if let Some(group) = rest.strip_prefix('{') {
                let group = group.split('}').next().unwrap_or("");
                named.extend(group.split(',').map(|g| {
                    g.trim()
                        .split(|c: char| !c.is_alphanumeric() && c != '_')
                        .next()
                        .unwrap_or("")
                        .to_string()
                }));
            } else {
                let end = rest
                    .find(|c: char| !c.is_alphanumeric() && c != '_')
                    .unwrap_or(rest.len());
                named.push(rest[..end].to_string());
            }
        }
        let edges: &mut std::collections::BTreeSet<String> = graph.entry(from.clone()).or_default();
        edges.extend(
            named
                .into_iter()
                .filter(|n| n != &from && modules.contains(n)),
        );
    }
    graph
}

#[test]
fn no_two_top_level_modules_depend_on_each_other_even_through_others() {
    let graph = module_imports();
    // Each module's reach, by a walk; a module that reaches itself is in a cycle.
    let mut cycles = Vec::new();
    for start in graph.keys() {
        let mut seen = std::collections::BTreeSet::new();
        let mut stack: Vec<(String, Vec<String>)> = vec![(start.clone(), vec![start.clone()])];
        while let Some((m, p)) = stack.pop() {
            for next in graph.get(&m).into_iter().flatten() {
                if next == start {
                    let mut c = p.clone();
                    c.push(start.clone());
                    cycles.push(c.join(" -> "));
                } else if seen.insert(next.clone()) {
                    let mut q = p.clone();
                    q.push(next.clone());
                    stack.push((next.clone(), q));
                }
            }
        }
    }
    assert!(
        cycles.is_empty(),
        "import cycles between top-level modules of src/ (move the shared item into the module that owns the concept, or a leaf both can import): {cycles:#?}"
    );
    // The walk sees the graph: the flow of DESIGN.md is there.
    assert!(graph["derive"].contains("probe") && graph["plan"].contains("model"));
}
