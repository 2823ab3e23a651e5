//! Running a small `sh` script on a node: on this machine through `tokio::process`, on a remote
//! node through the SSH layer's [`RemoteNode`]. The host-process runtime is written as such
//! scripts, so local and remote nodes take the same path. Decides nothing.

use std::process::Stdio;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::BoxStream;
use futures::{StreamExt, TryStreamExt};
use tokio::io::AsyncWriteExt;

use super::error::RuntimeError;
use super::target::{Reach, ShellOutput};

/// Runs `script` with `sh -c` on the node `reach` describes, feeding `stdin`, within
/// `timeout`. A script that exits non-zero is `Ok` (look at `code`); failing to run it at all is
/// an error.
pub async fn run(
    reach: &Reach,
    script: &str,
    stdin: Vec<u8>,
    timeout: Duration,
) -> Result<ShellOutput, RuntimeError> {
    let fut = async {
        match reach {
            Reach::Local => run_local(script, stdin).await,
            Reach::Remote(remote) => remote
                .run(script, stdin)
                .await
                .map_err(|e| RuntimeError::Other(format!("{}: {e}", remote.describe()))),
            Reach::EngineOnly(ep) => Err(no_shell(ep)),
        }
    };
    match tokio::time::timeout(timeout, fut).await {
        Ok(r) => r,
        Err(_) => Err(RuntimeError::Timeout {
            what: format!("`sh -c {}`", first_line(script)),
            after: timeout,
            last: "no exit".to_string(),
        }),
    }
}

/// Runs `script` and streams its stdout until it exits (for `logs -f`).
pub fn stream(reach: &Reach, script: &str) -> BoxStream<'static, Result<Bytes, RuntimeError>> {
    match reach {
        Reach::Local => stream_local(script.to_string()),
        Reach::Remote(remote) => {
            let who = remote.describe();
            remote
                .stream(script)
                .map_err(move |e| RuntimeError::Other(format!("{who}: {e}")))
                .boxed()
        }
        Reach::EngineOnly(ep) => {
            futures::stream::once(futures::future::ready(Err(no_shell(ep)))).boxed()
        }
    }
}

fn no_shell(ep: &super::target::EngineEndpoint) -> RuntimeError {
    RuntimeError::Other(format!(
        "this node is reached only through the Docker socket {ep} (given with --engine); the host runtime needs this machine or an SSH connection to it"
    ))
}

fn first_line(script: &str) -> String {
    let line = script.trim().lines().next().unwrap_or("");
    line.chars().take(60).collect()
}

async fn run_local(script: &str, stdin: Vec<u8>) -> Result<ShellOutput, RuntimeError> {
    let mut child = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(script)
        // Its own process group: a Ctrl-C in the terminal reaches spark-launch, which then
        // cleans up, and not the half-done scripts it runs.
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|e| RuntimeError::Other(format!("cannot run sh on this machine: {e}")))?;
    if let Some(mut input) = child.stdin.take() {
        // A script that does not read its stdin closes it early; that is not an error.
        let _ = input.write_all(&stdin).await;
        drop(input);
    }
    let out = child
        .wait_with_output()
        .await
        .map_err(|e| RuntimeError::Other(format!("sh on this machine: {e}")))?;
    Ok(ShellOutput {
        code: out.status.code(),
        stdout: out.stdout,
        stderr: out.stderr,
    })
}

fn stream_local(script: String) -> BoxStream<'static, Result<Bytes, RuntimeError>> {
    let spawned = tokio::process::Command::new("sh")
        .arg("-c")
        .arg(&script)
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn();
    match spawned {
        Err(e) => futures::stream::once(futures::future::ready(Err(RuntimeError::Other(format!(
            "cannot run sh on this machine: {e}"
        )))))
        .boxed(),
        Ok(mut child) => {
            let Some(stdout) = child.stdout.take() else {
                return futures::stream::empty().boxed();
            };
            let reader = tokio_util::io::ReaderStream::new(stdout)
                .map_err(|e| RuntimeError::Other(format!("read output: {e}")));
            // Keep the child alive (and killed on drop) as long as the stream is.
            futures::stream::unfold((reader, child), |(mut reader, child)| async move {
                reader.next().await.map(|item| (item, (reader, child)))
            })
            .boxed()
        }
    }
}

/// Quotes one word for `sh`.
pub fn quote(word: &str) -> String {
    shlex::try_quote(word)
        .map(|q| q.into_owned())
        .unwrap_or_else(|_| format!("'{}'", word.replace('\0', "").replace('\'', "'\\''")))
}

/// Quotes a whole command line for `sh`.
pub fn quote_all(argv: &[String]) -> String {
    argv.iter().map(|a| quote(a)).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_local_script_gets_its_stdin_and_reports_its_exit_code() {
        let out = run(
            &Reach::Local,
            "cat; echo oops >&2; exit 3",
            b"hello".to_vec(),
            Duration::from_secs(10),
        )
        .await
        .unwrap();
        assert_eq!(out.code, Some(3));
        assert_eq!(out.stdout, b"hello");
        assert_eq!(out.stderr, b"oops\n");
    }

    #[tokio::test]
    async fn a_script_that_overruns_is_a_timeout_error() {
        let err = run(
            &Reach::Local,
            "sleep 5",
            Vec::new(),
            Duration::from_millis(200),
        )
        .await
        .unwrap_err();
        assert!(matches!(err, RuntimeError::Timeout { .. }), "{err}");
    }

    #[test]
    fn quoting_survives_spaces_and_quotes() {
        assert_eq!(
            quote_all(&["echo".into(), "it's a b".into()]),
            r#"echo "it's a b""#
        );
    }
}
