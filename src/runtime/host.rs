//! The host-process runtime (`--runtime host`): a job's work as plain processes instead of
//! containers, for bare-metal installs and GPU machines without Docker. Same job model as
//! containers: the name `sl-<job>-<node>`, the same labels, found again by `status`, `logs` and
//! `stop` with no local state.
//!
//! Each process has a folder on its node, `$STATE/jobs/<name>/` (`$SPARK_LAUNCH_STATE_DIR`,
//! else `$XDG_STATE_HOME/spark-launch`, else `~/.local/state/spark-launch`) holding `pid`,
//! `log` (stdout and stderr), `labels` (`key=value` lines), `command`, `started` (epoch
//! seconds) and, once it ended by itself, `exit`. The process runs in its own session (so `stop`
//! signals the whole group) under a tiny `sh` wrapper that records the exit code. A pid counts as
//! ours only while `/proc/<pid>/cmdline` still names its folder, so a reused pid is never
//! signalled.
//!
//! Private by construction: the jobs folder and every job folder are 0700 and every file in
//! them 0600 (the scripts run under `umask 077`; the job's own process gets the user's umask
//! back). The job's environment never appears on a command line (where `ps` shows it to every
//! user): it travels on the script's stdin into `env`, a 0600 file the wrapper reads into the
//! process's environment and then deletes; `exec` reads it from stdin the same way.
//!
//! Everything is a short `sh` script run through `shell`, locally or over SSH: the same code
//! path for both. Decides nothing.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use tokio_util::sync::CancellationToken;

use super::engine::ExecOutput;
use super::error::RuntimeError;
use super::shell::{NodeShell, ShellOutput, run_within};
use super::wait::{self, Probe};
use crate::plan::ProcessSpec;
use crate::quote::{Style, join, quote};

/// Short scripts (start, list, stop bookkeeping) must answer within this.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(60);

/// The state folder, as `sh` computes it on the node.
const STATE: &str =
    r#"S="${SPARK_LAUNCH_STATE_DIR:-${XDG_STATE_HOME:-$HOME/.local/state}/spark-launch}/jobs""#;

/// `alive DIR PID`: true while PID is the wrapper recorded in DIR.
const ALIVE_FN: &str = r#"alive() { [ -n "$2" ] && [ -r "/proc/$2/cmdline" ] && tr '\0' '\n' < "/proc/$2/cmdline" 2>/dev/null | grep -qxF "$1"; }"#;

/// The wrapper run in the new session: records its pid, runs the command with the job's
/// environment (read from `env`, which it then deletes) and the user's umask, records the exit
/// code. `$1` is the folder, `$2` the user's umask; the rest is the command.
const WRAPPER: &str = r#"d="$1"; u="$2"; shift 2; echo $$ > "$d/pid.tmp" && mv "$d/pid.tmp" "$d/pid"; ( umask "$u"; set -a; . "$d/env"; set +a; rm -f "$d/env"; exec "$@" ); echo $? > "$d/exit""#;

/// The environment as `export NAME='value'` lines for `sh` to read (never a command line).
/// A name that is not a shell variable name is refused.
pub fn env_file(env: &BTreeMap<String, String>) -> Result<String, RuntimeError> {
    let mut out = String::new();
    for (k, v) in env {
        let ok = k.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && k.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !ok {
            return Err(RuntimeError::Other(format!(
                "{k:?} is not an environment variable name (letters, digits and '_', not starting with a digit)"
            )));
        }
        out.push_str(&format!("export {k}={}\n", quote(v, Style::Minimal)?));
    }
    Ok(out)
}

/// A process found on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostProcess {
    pub name: String,
    pub pid: Option<u32>,
    pub alive: bool,
    pub exit_code: Option<i64>,
    pub started: Option<i64>,
    pub command: String,
    pub labels: BTreeMap<String, String>,
}

fn check(out: &ShellOutput, what: &str) -> Result<(), RuntimeError> {
    if out.success() {
        Ok(())
    } else {
        Err(RuntimeError::Command {
            command: what.to_string(),
            status: match out.status {
                -1 => "a signal".to_string(),
                c => format!("exit status {c}"),
            },
            stderr: out.stderr.clone(),
        })
    }
}

/// Starts `spec` on the node in its own session; returns its pid. Refuses when a process of
/// that name is already recorded there.
pub async fn start(sh: &dyn NodeShell, spec: &ProcessSpec) -> Result<u32, RuntimeError> {
    if spec.command.is_empty() {
        return Err(RuntimeError::Other(format!(
            "start process {}: the plan gives no command",
            spec.name
        )));
    }
    let cd = match &spec.workdir {
        Some(w) => format!("cd {} || exit 18\n", quote(w, Style::Minimal)?),
        None => String::new(),
    };
    let labels: String = spec
        .labels
        .iter()
        .map(|(k, v)| format!("{k}={}\n", v.replace('\n', " ")))
        .collect();
    let env = env_file(&spec.env)?;
    let script = format!(
        r#"set -u
um=$(umask)
umask 077
{STATE}
mkdir -p "$S" && chmod 700 "$S" || exit 19
d="$S/{name}"
if [ -e "$d" ]; then echo "process {name} already exists (its folder $d is there): stop it with spark-launch stop" >&2; exit 17; fi
mkdir "$d" || exit 19
: > "$d/labels"
i=0
while [ $i -lt {label_lines} ] && IFS= read -r l; do printf '%s\n' "$l" >> "$d/labels"; i=$((i+1)); done
cat > "$d/env"
printf '%s\n' {cmdline} > "$d/command"
date +%s > "$d/started"
{cd}setsid sh -c {wrapper} sl-wrapper "$d" "$um" {argv} < /dev/null > "$d/log" 2>&1 &
i=0
while [ ! -s "$d/pid" ] && [ $i -lt 100 ]; do sleep 0.1; i=$((i+1)); done
[ -s "$d/pid" ] || {{ echo "the process did not start within 10s" >&2; exit 20; }}
cat "$d/pid"
"#,
        name = spec.name,
        label_lines = spec.labels.len(),
        cmdline = quote(&join(&spec.command)?, Style::Minimal)?,
        wrapper = quote(WRAPPER, Style::Minimal)?,
        argv = join(&spec.command)?,
    );
    let stdin = format!("{labels}{env}");
    let out = run_within(sh, &script, stdin.into_bytes(), SCRIPT_TIMEOUT).await?;
    check(&out, &format!("start process {}", spec.name))?;
    out.stdout
        .trim()
        .parse()
        .map_err(|_| RuntimeError::Other(format!("start process {}: no pid came back", spec.name)))
}

/// Every process recorded on the node (running or ended).
pub async fn list(sh: &dyn NodeShell) -> Result<Vec<HostProcess>, RuntimeError> {
    let script = format!(
        r#"{STATE}
{ALIVE_FN}
[ -d "$S" ] || exit 0
for d in "$S"/*/; do
  d="${{d%/}}"
  [ -f "$d/labels" ] || continue
  echo "@@ ${{d##*/}}"
  pid=$(cat "$d/pid" 2>/dev/null || true)
  echo "pid $pid"
  if alive "$d" "$pid"; then echo "alive 1"; else echo "alive 0"; fi
  [ -f "$d/exit" ] && echo "exit $(cat "$d/exit")"
  [ -f "$d/started" ] && echo "started $(cat "$d/started")"
  echo "command $(cat "$d/command" 2>/dev/null)"
  sed 's/^/label /' "$d/labels"
done
exit 0
"#
    );
    let out = run_within(sh, &script, Vec::new(), SCRIPT_TIMEOUT).await?;
    check(&out, "list host processes")?;
    Ok(parse_list(&out.stdout))
}

/// The `libnccl` files the processes of host job `name` have mapped (every process of its
/// wrapper's session, from `/proc/PID/maps`), each with the pid of a process that maps it;
/// `None` when the job's process is not running. Only the user's own processes' maps are
/// readable, which is what a job of theirs is.
pub async fn mapped_nccl(
    sh: &dyn NodeShell,
    name: &str,
) -> Result<Option<Vec<(u32, String)>>, RuntimeError> {
    let script = format!(
        r#"{STATE}
{ALIVE_FN}
d="$S/"{name}
pid=$(cat "$d/pid" 2>/dev/null || true)
alive "$d" "$pid" || exit 0
echo alive
for f in /proc/[0-9]*/stat; do
  line=
  {{ IFS= read -r line; }} < "$f" 2>/dev/null || continue
  # After the command name: state, ppid, pgrp, session.
  set -- ${{line##*) }}
  [ "${{4:-}}" = "$pid" ] || continue
  p=${{f#/proc/}}; p=${{p%/stat}}
  grep -o '/[^ ]*libnccl[^ ]*' "/proc/$p/maps" 2>/dev/null | sort -u | sed "s|^|$p |"
done
exit 0
"#,
        name = quote(name, Style::Minimal)?,
    );
    let out = run_within(sh, &script, Vec::new(), SCRIPT_TIMEOUT).await?;
    check(&out, &format!("read the maps of process {name}"))?;
    Ok(parse_mapped(&out.stdout))
}

/// `alive` then `PID PATH` lines: one entry per path, the first pid that maps it.
fn parse_mapped(text: &str) -> Option<Vec<(u32, String)>> {
    let mut lines = text.lines();
    if lines.next() != Some("alive") {
        return None;
    }
    let mut out: Vec<(u32, String)> = Vec::new();
    for l in lines {
        let Some((pid, path)) = l.split_once(' ') else {
            continue;
        };
        let Ok(pid) = pid.parse() else { continue };
        if !out.iter().any(|(_, p)| p == path) {
            out.push((pid, path.to_string()));
        }
    }
    Some(out)
}

fn parse_list(text: &str) -> Vec<HostProcess> {
    let mut out: Vec<HostProcess> = Vec::new();
    for line in text.lines() {
        if let Some(name) = line.strip_prefix("@@ ") {
            out.push(HostProcess {
                name: name.to_string(),
                pid: None,
                alive: false,
                exit_code: None,
                started: None,
                command: String::new(),
                labels: BTreeMap::new(),
            });
            continue;
        }
        let Some(p) = out.last_mut() else { continue };
        let (key, value) = line.split_once(' ').unwrap_or((line, ""));
        match key {
            "pid" => p.pid = value.trim().parse().ok(),
            "alive" => p.alive = value.trim() == "1",
            "exit" => p.exit_code = value.trim().parse().ok(),
            "started" => p.started = value.trim().parse().ok(),
            "command" => p.command = value.to_string(),
            "label" => {
                if let Some((k, v)) = value.split_once('=') {
                    p.labels.insert(k.to_string(), v.to_string());
                }
            }
            _ => {}
        }
    }
    out
}

/// Stops the process `name` (SIGTERM to its session, SIGKILL after `grace`) and removes its
/// folder. `Ok(false)` when there was no such process.
pub async fn stop(sh: &dyn NodeShell, name: &str, grace: Duration) -> Result<bool, RuntimeError> {
    let tenths = grace.as_millis() / 100;
    let script = format!(
        r#"{STATE}
{ALIVE_FN}
d="$S/{name}"
[ -d "$d" ] || {{ echo absent; exit 0; }}
pid=$(cat "$d/pid" 2>/dev/null || true)
if alive "$d" "$pid"; then
  kill -TERM "-$pid" 2>/dev/null || kill -s TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null
  i=0
  while alive "$d" "$pid" && [ $i -lt {tenths} ]; do sleep 0.1; i=$((i+1)); done
  if alive "$d" "$pid"; then kill -KILL "-$pid" 2>/dev/null || kill -s KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null; fi
  i=0
  while alive "$d" "$pid" && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done
  if alive "$d" "$pid"; then echo "process $pid survived SIGKILL" >&2; exit 21; fi
fi
rm -rf "$d"
echo removed
"#
    );
    let timeout = SCRIPT_TIMEOUT.saturating_add(grace);
    let out = run_within(sh, &script, Vec::new(), timeout).await?;
    check(&out, &format!("stop process {name}"))?;
    Ok(out.stdout.trim() == "removed")
}

/// Runs a command on the node (not inside the job's process) and collects its output.
pub async fn exec(
    sh: &dyn NodeShell,
    command: &[String],
    env: &BTreeMap<String, String>,
    workdir: Option<&str>,
    timeout: Duration,
) -> Result<ExecOutput, RuntimeError> {
    let cd = match workdir {
        Some(w) => format!("cd {} || exit 18\n", quote(w, Style::Minimal)?),
        None => String::new(),
    };
    // The environment comes on stdin, never on a command line.
    let script = format!(
        "set -a\neval \"$(cat)\"\nset +a\n{cd}exec {} < /dev/null",
        join(command)?
    );
    let stdin = env_file(env)?;
    let out = run_within(sh, &script, stdin.into_bytes(), timeout).await?;
    Ok(ExecOutput {
        exit_code: i64::from(out.status),
        stdout: out.stdout,
        stderr: out.stderr,
    })
}

/// Writes a file on the node (parent folders created).
pub async fn write_file(
    sh: &dyn NodeShell,
    path: &str,
    content: &[u8],
    mode: u32,
) -> Result<(), RuntimeError> {
    let p = quote(path, Style::Minimal)?;
    let script = format!(
        "set -e\nmkdir -p \"$(dirname {p})\"\ncat > {p}.sl-tmp\nchmod {mode:o} {p}.sl-tmp\nmv {p}.sl-tmp {p}\n"
    );
    let out = run_within(sh, &script, content.to_vec(), SCRIPT_TIMEOUT).await?;
    check(&out, &format!("write {path}"))
}

/// Waits until the process `name` has ended; returns its exit code (-1 when it was killed
/// before it could record one).
pub async fn wait_exit(
    sh: &dyn NodeShell,
    name: &str,
    timeout: Duration,
    cancel: &CancellationToken,
) -> Result<i64, RuntimeError> {
    let script = format!(
        r#"{STATE}
{ALIVE_FN}
d="$S/{name}"
[ -d "$d" ] || {{ echo gone; exit 0; }}
pid=$(cat "$d/pid" 2>/dev/null || true)
if alive "$d" "$pid"; then echo running; elif [ -f "$d/exit" ]; then echo "exit $(cat "$d/exit")"; else echo "exit -1"; fi
"#
    );
    let what = format!("process {name} to exit");
    wait::until(
        &what,
        timeout,
        Duration::from_millis(500),
        cancel,
        || async {
            match run_within(sh, &script, Vec::new(), SCRIPT_TIMEOUT).await {
                // A failed round trip is not an answer: ask again until the deadline.
                Err(e) => Probe::NotYet(format!("cannot ask the node: {e}")),
                Ok(out) => {
                    let text = out.stdout.trim().to_string();
                    if let Some(code) = text.strip_prefix("exit ") {
                        Probe::Ready(code.trim().parse().unwrap_or(-1))
                    } else if text == "gone" {
                        Probe::Abort(RuntimeError::Other(format!("{what}: the process is gone")))
                    } else {
                        Probe::NotYet(text)
                    }
                }
            }
        },
    )
    .await
}

/// The process's log; with `follow`, then what it writes until it ends.
pub fn logs(
    sh: &dyn NodeShell,
    name: &str,
    follow: bool,
) -> BoxStream<'static, Result<Bytes, RuntimeError>> {
    let script = if follow {
        format!(
            r#"{STATE}
{ALIVE_FN}
d="$S/{name}"
[ -f "$d/log" ] || {{ echo "no process {name} on this node" >&2; exit 3; }}
pid=$(cat "$d/pid" 2>/dev/null || true)
tail -n +1 -f "$d/log" & t=$!
while alive "$d" "$pid"; do sleep 1; done
sleep 1
kill $t 2>/dev/null
"#
        )
    } else {
        format!(
            r#"{STATE}
d="$S/{name}"
[ -f "$d/log" ] || {{ echo "no process {name} on this node" >&2; exit 3; }}
cat "$d/log"
"#
        )
    };
    sh.stream(&script).map_err(RuntimeError::from).boxed()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_environment_value_with_a_nul_byte_is_refused_not_cut() {
        let env = BTreeMap::from([("TOKEN".to_string(), "abc\0def".to_string())]);
        let e = env_file(&env).unwrap_err().to_string();
        assert!(e.contains("abc\\0def") && e.contains("NUL byte"), "{e}");
        let ok = BTreeMap::from([("A".to_string(), "it's".to_string())]);
        assert_eq!(env_file(&ok).unwrap(), "export A=\"it's\"\n");
    }

    #[test]
    fn mapped_files_are_listed_once_each_and_a_job_not_running_is_none() {
        let text = "alive\n101 /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3\n102 /usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3\n102 /sp/nvidia/nccl/lib/libnccl.so.2\n";
        assert_eq!(
            parse_mapped(text),
            Some(vec![
                (
                    101,
                    "/usr/lib/x86_64-linux-gnu/libnccl.so.2.28.3".to_string()
                ),
                (102, "/sp/nvidia/nccl/lib/libnccl.so.2".to_string()),
            ])
        );
        assert_eq!(parse_mapped("alive\n"), Some(vec![]));
        assert_eq!(parse_mapped(""), None);
    }

    #[test]
    fn the_listing_is_parsed_per_process() {
        let text = "@@ sl-a-n1\npid 42\nalive 1\nstarted 1700000000\ncommand sleep 10\nlabel dev.spark-launch.job=a\nlabel dev.spark-launch.node=n1\n@@ sl-b-n1\npid \nalive 0\nexit 3\ncommand false\nlabel dev.spark-launch.job=b\n";
        let list = parse_list(text);
        assert_eq!(list.len(), 2);
        assert_eq!(list[0].pid, Some(42));
        assert!(list[0].alive);
        assert_eq!(list[0].labels["dev.spark-launch.node"], "n1");
        assert_eq!(list[1].exit_code, Some(3));
        assert!(!list[1].alive);
        assert_eq!(list[1].pid, None);
    }
}
