//! Every `spark-launch …` command line in the code blocks of the README, of the topic pages in
//! `docs/` and of `recipes/README.md` runs as written: a command that only plans or reads snapshots runs
//! exactly as printed, from the clone's root; one that would touch machines runs with
//! `--dry-run` and the bundled snapshots in place of the nodes it names; one that needs live
//! nodes is listed below with why it is not run here (and which test runs it on simulated
//! nodes). A command the list does not know fails the test, so a new example is classified
//! when it is written; an entry no README holds any more fails it too. Every link between these
//! pages reaches a file and a heading that exist.

use std::path::Path;
use std::process::Command;

/// How the test runs one README command.
#[derive(Clone, Copy, Debug)]
enum Run {
    /// Exactly as printed.
    AsWritten,
    /// On the snapshots of this bundled fixture (in place of any `--hosts`), with `--dry-run`
    /// added when `dry_run` and the line lacks it.
    OnSnapshots {
        fixture: &'static str,
        dry_run: bool,
    },
    /// Not run: it needs what this test has not (the reason says which test runs it).
    Live(&'static str),
}

const SIM: &str =
    "a simulated cluster (root, the Docker Engine): tests/sim_cli.rs runs this walk-through on one";

/// Every command of the READMEs' code blocks, as printed (comments cut), and how it runs.
const COMMANDS: &[(&str, Run)] = &[
    (
        "spark-launch up smoke-test --dry-run --snapshot spark=tests/fixtures/seed-001-two-sparks-both-twins/spark --snapshot spark2=tests/fixtures/seed-001-two-sparks-both-twins/spark2",
        Run::AsWritten,
    ),
    (
        "spark-launch llamacpp /models/q4.gguf --workers 1 --dry-run --snapshot spark=tests/fixtures/seed-001-two-sparks-both-twins/spark --snapshot spark2=tests/fixtures/seed-001-two-sparks-both-twins/spark2",
        Run::AsWritten,
    ),
    (
        "spark-launch llamacpp unsloth/Qwen3-30B-A3B-GGUF:Q4_K_M --workers 1 --dry-run --snapshot spark=tests/fixtures/seed-001-two-sparks-both-twins/spark --snapshot spark2=tests/fixtures/seed-001-two-sparks-both-twins/spark2",
        Run::AsWritten,
    ),
    ("spark-launch sim up", Run::Live(SIM)),
    (
        "spark-launch export k8s smoke-test --hf-home /home/nvidia/.cache/huggingface --out smoke-k8s",
        Run::OnSnapshots {
            fixture: "seed-001-two-sparks-both-twins",
            dry_run: true,
        },
    ),
    ("spark-launch up smoke-test -d --gpus none", Run::Live(SIM)),
    ("spark-launch bench smoke-test", Run::Live(SIM)),
    (
        "spark-launch bench --protocol llama-benchy --url http://127.0.0.1:8000/v1 --tokenizer tokenizer.json --book-url book.txt --pp 2048 --tg 32 --depth 0 4096 --concurrency 1 2 --save-result llama-benchy.json",
        Run::Live(
            "a served model: tests/bench_protocols.rs runs this protocol against the paced stand-in server",
        ),
    ),
    (
        "spark-launch check smoke-test",
        Run::Live("a running job: tests/check_sim.rs checks one by name"),
    ),
    (
        "spark-launch check --url http://127.0.0.1:8000/v1 --context 8000 --json",
        Run::Live("a server: tests/check_answers.rs runs check --url against the stand-in"),
    ),
    (
        "spark-launch bench --protocol lil --url http://127.0.0.1:8000/v1 --tokenizer tokenizer.json --book-url book.txt --contexts 0 16384 --concurrency 1 8 --duration 30 --out runs/lil.json",
        Run::Live(
            "a served model: tests/bench_protocols.rs runs this protocol against the paced stand-in server",
        ),
    ),
    ("spark-launch status --watch smoke-test", Run::Live(SIM)),
    ("spark-launch supervise smoke-test", Run::Live(SIM)),
    (
        "spark-launch export systemd smoke-test -o -",
        Run::Live(SIM),
    ),
    ("spark-launch sim down", Run::Live(SIM)),
    (
        "spark-launch fabric plan  --hosts $H",
        Run::OnSnapshots {
            fixture: "fresh-two-sparks",
            dry_run: false,
        },
    ),
    (
        "spark-launch fabric apply --hosts $H",
        Run::OnSnapshots {
            fixture: "fresh-two-sparks",
            dry_run: true,
        },
    ),
    (
        "spark-launch discover --save",
        Run::Live(
            "mDNS answers from the other boxes on this machine's fabric ports: tests/discover.rs runs it on simulated nodes",
        ),
    ),
    (
        "spark-launch trust",
        Run::Live(
            "first SSH contact with every node: tests/trust.rs runs it on simulated nodes (and `sim up` runs it for its nodes)",
        ),
    ),
    (
        "spark-launch doctor",
        Run::OnSnapshots {
            fixture: "seed-001-two-sparks-both-twins",
            dry_run: false,
        },
    ),
    (
        "spark-launch fabric test",
        Run::OnSnapshots {
            fixture: "seed-001-two-sparks-both-twins",
            dry_run: true,
        },
    ),
    (
        "spark-launch nccl-test",
        Run::OnSnapshots {
            fixture: "seed-001-two-sparks-both-twins",
            dry_run: true,
        },
    ),
    (
        "spark-launch vllm --tp 2 Qwen/Qwen2.5-0.5B-Instruct",
        Run::OnSnapshots {
            fixture: "seed-001-two-sparks-both-twins",
            dry_run: true,
        },
    ),
    (
        "spark-launch up recipes/qwen2.5-0.5b-vllm-v1.yaml --dry-run",
        Run::OnSnapshots {
            fixture: "seed-001-two-sparks-both-twins",
            dry_run: true,
        },
    ),
    (
        "spark-launch up qwen2.5-0.5b-vllm-v2 --registry recipes --set max_model_len=8192",
        Run::OnSnapshots {
            fixture: "seed-001-two-sparks-both-twins",
            dry_run: true,
        },
    ),
    (
        "spark-launch profiles --registry recipes --snapshot spark=tests/fixtures/seed-001-two-sparks-both-twins/spark --snapshot spark2=tests/fixtures/seed-001-two-sparks-both-twins/spark2",
        Run::AsWritten,
    ),
    (
        "spark-launch up recipes/qwen2.5-0.5b-vllm-v1.yaml --dry-run --snapshot spark=tests/fixtures/seed-001-two-sparks-both-twins/spark --snapshot spark2=tests/fixtures/seed-001-two-sparks-both-twins/spark2",
        Run::AsWritten,
    ),
];

/// The pages whose examples are held to this: the README, every page of `docs/` and the
/// example recipes' README.
fn guide_pages() -> Vec<String> {
    let mut pages: Vec<String> = std::fs::read_dir(repo().join("docs"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .map(|n| format!("docs/{n}"))
        .collect();
    pages.sort();
    pages.insert(0, "README.md".to_string());
    pages.push("recipes/README.md".to_string());
    pages
}

/// The pages whose links are held to this: the guide pages and the READMEs of the other
/// folders a user opens.
fn readmes() -> Vec<String> {
    let mut pages = guide_pages();
    for other in [
        "launch-profiles/README.md",
        "compose/README.md",
        "images/README.md",
    ] {
        pages.push(other.to_string());
    }
    pages
}

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Every `spark-launch …` command in a fenced code block of `text`: lines that start with it
/// (a `$ ` prompt dropped) and the parts of `a && b` lines that do; a trailing `# comment` cut.
fn commands(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        if !in_block {
            continue;
        }
        let line = line.trim();
        let line = line.strip_prefix("$ ").unwrap_or(line);
        for part in line.split(" && ") {
            let part = part.trim();
            if !part.starts_with("spark-launch ") {
                continue;
            }
            let part = part.split(" # ").next().unwrap_or(part).trim_end();
            out.push(part.to_string());
        }
    }
    out
}

/// The `--snapshot` arguments of a bundled fixture (its `nodes` file lists them, head first).
fn snapshots(fixture: &str) -> Vec<String> {
    let dir = Path::new("tests/fixtures").join(fixture);
    let nodes = std::fs::read_to_string(repo().join(&dir).join("nodes")).unwrap();
    nodes
        .lines()
        .filter(|l| !l.trim().is_empty())
        .flat_map(|n| {
            [
                "--snapshot".to_string(),
                format!("{n}={}", dir.join(n).display()),
            ]
        })
        .collect()
}

/// The words of a command as a shell would split it (the examples use no quoting).
fn words(command: &str) -> Vec<String> {
    command.split_whitespace().map(str::to_string).collect()
}

#[test]
fn every_spark_launch_command_in_the_readmes_runs_as_written_or_is_listed_with_why_not() {
    let mut found = Vec::new();
    for readme in guide_pages() {
        let text = std::fs::read_to_string(repo().join(&readme)).unwrap();
        found.extend(commands(&text).into_iter().map(|c| (readme.to_string(), c)));
    }
    let unknown: Vec<&(String, String)> = found
        .iter()
        .filter(|(_, c)| !COMMANDS.iter().any(|(k, _)| k == c))
        .collect();
    assert!(
        unknown.is_empty(),
        "README commands this test does not know (add each to COMMANDS with how it runs): {unknown:#?}"
    );
    let stale: Vec<&str> = COMMANDS
        .iter()
        .map(|(c, _)| *c)
        .filter(|c| !found.iter().any(|(_, f)| f == c))
        .collect();
    assert!(
        stale.is_empty(),
        "no README holds these any more: {stale:#?}"
    );

    let home = tempfile::tempdir().unwrap();
    let mut failures = Vec::new();
    let mut ran = 0;
    for (command, how) in COMMANDS {
        let mut argv = words(command);
        match how {
            Run::Live(why) => {
                // The reason names the test that runs it on simulated nodes, which exists.
                let test = why
                    .split_whitespace()
                    .find(|w| w.starts_with("tests/") && w.ends_with(".rs"))
                    .unwrap_or_else(|| panic!("{command}: no test named in {why:?}"));
                assert!(
                    repo().join(test).is_file(),
                    "{command}: {test} does not exist"
                );
                continue;
            }
            Run::AsWritten => {}
            Run::OnSnapshots { fixture, dry_run } => {
                if let Some(i) = argv.iter().position(|w| w == "--hosts") {
                    argv.drain(i..(i + 2).min(argv.len()));
                }
                if *dry_run && !argv.iter().any(|w| w == "--dry-run") {
                    argv.push("--dry-run".into());
                }
                argv.extend(snapshots(fixture));
            }
        }
        assert_eq!(argv[0], "spark-launch");
        let out = Command::new(env!("CARGO_BIN_EXE_spark-launch"))
            .args(&argv[1..])
            .current_dir(repo())
            .env("HOME", home.path())
            .env("XDG_CONFIG_HOME", home.path().join(".config"))
            .env("SPARK_LAUNCH_STATE_DIR", home.path().join("state"))
            .env("SPARK_LAUNCH_NO_PROGRESS", "1")
            // A dry run on snapshots asks the Hub for the model's config.json unless told not
            // to: this test does not depend on the internet.
            .env("HF_HUB_OFFLINE", "1")
            .env_remove("SPARK_LAUNCH_CLUSTER")
            .env_remove("SPARK_LAUNCH_PROFILES")
            .output()
            .unwrap();
        ran += 1;
        if !out.status.success() {
            failures.push(format!(
                "{}\n  exit {:?}: {}",
                argv.join(" "),
                out.status.code(),
                String::from_utf8_lossy(&out.stderr)
                    .lines()
                    .filter(|l| l.starts_with("error") || l.contains("caused by"))
                    .collect::<Vec<_>>()
                    .join("\n    ")
            ));
        }
    }
    assert!(ran >= 10, "only {ran} commands ran");
    assert!(
        failures.is_empty(),
        "README commands that fail: {failures:#?}"
    );
}

#[test]
fn the_commands_are_found_in_fenced_blocks_after_prompts_and_inside_and_chains() {
    let text = "text spark-launch up x\n```sh\n$ spark-launch doctor   # ready?\ncargo b && spark-launch env\nsaved: spark-launch x\n```\n";
    assert_eq!(commands(text), ["spark-launch doctor", "spark-launch env"]);
}

/// The anchors a Markdown renderer gives the headings of `text` (outside code blocks): lower
/// case, spaces as `-`, letters, digits, `-` and `_` kept, the rest dropped; a repeated heading
/// gets `-1`, `-2`, ….
fn anchors(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut in_block = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            in_block = !in_block;
            continue;
        }
        let Some(heading) = line.strip_prefix('#') else {
            continue;
        };
        if in_block {
            continue;
        }
        let heading = heading.trim_start_matches('#');
        if !heading.starts_with(' ') {
            continue;
        }
        let slug: String = heading
            .trim()
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let seen = out
            .iter()
            .filter(|a| {
                **a == slug
                    || a.strip_prefix(&format!("{slug}-"))
                        .is_some_and(|n| n.parse::<u32>().is_ok())
            })
            .count();
        out.push(if seen == 0 {
            slug
        } else {
            format!("{slug}-{seen}")
        });
    }
    out
}

/// Every `[text](target)` link of `text` whose target is in this repository (not a URL).
fn local_links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = text;
    while let Some(i) = rest.find("](") {
        rest = &rest[i + 2..];
        let Some(end) = rest.find(')') else { break };
        let target = &rest[..end];
        if !target.contains("://") && !target.starts_with("mailto:") && !target.contains(' ') {
            out.push(target.to_string());
        }
        rest = &rest[end..];
    }
    out
}

#[test]
fn every_link_of_the_readme_and_docs_reaches_a_file_and_a_heading_that_exist() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in readmes() {
        let path = repo().join(&page);
        let text = std::fs::read_to_string(&path).unwrap();
        for link in local_links(&text) {
            let (file, anchor) = match link.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (link.as_str(), None),
            };
            let target = if file.is_empty() {
                path.clone()
            } else {
                path.parent().unwrap().join(file)
            };
            checked += 1;
            if !target.exists() {
                broken.push(format!("{page}: {link}: no such file"));
                continue;
            }
            if let Some(anchor) = anchor {
                let body = std::fs::read_to_string(&target).unwrap_or_default();
                if !anchors(&body).iter().any(|a| a == anchor) {
                    broken.push(format!("{page}: {link}: no such heading"));
                }
            }
        }
    }
    assert!(checked >= 20, "only {checked} links checked");
    assert!(broken.is_empty(), "broken links: {broken:#?}");
}

#[test]
fn the_readme_is_a_guide_of_at_most_400_lines_that_links_every_docs_page() {
    let readme = std::fs::read_to_string(repo().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 400,
        "README.md has {lines} lines: move reference text to docs/"
    );
    for page in readmes().iter().filter(|p| p.starts_with("docs/")) {
        assert!(
            readme.contains(&format!("]({page}")),
            "README.md does not link {page}"
        );
    }
}

#[test]
fn headings_get_the_anchors_a_renderer_gives_them() {
    let text = "# Keeping a job up: `supervise`, `--supervise`\n```\n# not a heading\n```\n## A b\n## A b\n";
    assert_eq!(
        anchors(text),
        ["keeping-a-job-up-supervise---supervise", "a-b", "a-b-1"]
    );
}
