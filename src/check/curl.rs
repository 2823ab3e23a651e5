//! The check asked from a node: a `curl` script that sends one question to the API the node
//! serves (readiness and the supervisor ask from the head, where a job bound to loopback still
//! answers), and its output read back into an answer. The API key comes on stdin as a header
//! line, never on a command line. Pure: text in, text out; the node's shell runs it.

use super::reply::{self, Answered};
use crate::quote::{Style, quote};

/// One word single-quoted for the script; a word with a NUL byte (which no shell can carry)
/// becomes an empty word, and curl then says what is missing.
fn word(v: &str) -> String {
    quote(v, Style::Always)
        .map(std::borrow::Cow::into_owned)
        .unwrap_or_else(|_| "''".into())
}

/// The script that sends `body` to `url` (`http://HOST:PORT`) + `/v1/chat/completions`,
/// waiting at most `max_time_s`. It prints `status CODE`, `curl EXIT`, `curlerr MESSAGE`,
/// then the body of the answer.
pub fn script(url: &str, body: &serde_json::Value, max_time_s: u64) -> String {
    let url = word(&format!("{}/v1/{}", url.trim_end_matches('/'), super::PATH));
    let body = word(&body.to_string());
    let max_time = max_time_s.max(1);
    format!(
        r#"command -v curl >/dev/null || {{ echo "curl is not installed on this node" >&2; exit 127; }}
T=$(umask 077; mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT
IFS= read -r hdr || hdr=
: > "$T/h"
[ -n "$hdr" ] && printf '%s\n' "$hdr" > "$T/h"
: > "$T/b"
code=$(curl -sS --max-time {max_time} -H @"$T/h" -H 'Content-Type: application/json' -d {body} -o "$T/b" -w '%{{http_code}}' {url} 2>"$T/e")
rc=$?
printf 'status %s\ncurl %s\ncurlerr %s\n' "$code" "$rc" "$(head -c 300 "$T/e" | tr '\n' ' ')"
cat "$T/b"
"#
    )
}

/// Reads [`script`]'s output into the answer, or why none came (`max_time_s` as the script
/// was built with, named when curl timed out).
pub fn parse(out: &str, max_time_s: u64) -> Answered {
    let mut lines = out.splitn(4, '\n');
    let status = lines
        .next()
        .and_then(|l| l.strip_prefix("status "))
        .and_then(|c| c.trim().parse::<u16>().ok());
    let curl_exit = lines
        .next()
        .and_then(|l| l.strip_prefix("curl "))
        .and_then(|c| c.trim().parse::<i32>().ok());
    let curl_err = lines
        .next()
        .and_then(|l| l.strip_prefix("curlerr "))
        .unwrap_or("")
        .trim()
        .to_string();
    let body = lines.next().unwrap_or("");
    match (curl_exit, status) {
        (Some(28), _) => Err(format!("no answer within {max_time_s}s")),
        (Some(0), Some(code)) => reply::parse(code, body),
        (Some(0), None) | (None, _) => Err(format!(
            "unreadable output of the question's script: {}",
            super::cut(out)
        )),
        (Some(code), _) => Err(if curl_err.is_empty() {
            format!("curl exited with code {code}")
        } else {
            super::cut(&curl_err)
        }),
    }
}

/// The header line the script reads on stdin: the key's `Authorization`, or an empty line.
pub fn header_stdin(key: Option<&str>) -> Vec<u8> {
    match key {
        Some(k) => format!("Authorization: Bearer {k}\n").into_bytes(),
        None => b"\n".to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::NodeName;
    use crate::runtime::shell::{LocalShell, NodeShell};

    #[test]
    fn the_output_is_read_into_an_answer_or_the_reason_there_is_none() {
        let out = "status 200\ncurl 0\ncurlerr \n{\"choices\":[{\"message\":{\"content\":\"703\"},\"finish_reason\":\"stop\"}]}";
        assert_eq!(parse(out, 9).unwrap().answer, "703");
        assert_eq!(
            parse("status 000\ncurl 28\ncurlerr timed out\n", 9).unwrap_err(),
            "no answer within 9s"
        );
        assert_eq!(
            parse(
                "status 000\ncurl 7\ncurlerr curl: (7) Failed to connect\n",
                9
            )
            .unwrap_err(),
            "curl: (7) Failed to connect"
        );
        assert_eq!(
            parse(
                "status 401\ncurl 0\ncurlerr \n{\"error\": \"Unauthorized\"}",
                9
            )
            .unwrap_err(),
            "HTTP 401: Unauthorized"
        );
        assert!(parse("", 9).unwrap_err().starts_with("unreadable"));
    }

    /// A real HTTP server answering a chat completion, asked by the real script with the key
    /// on stdin (and never on its command line).
    #[tokio::test]
    async fn the_script_asks_a_real_server_with_the_key_from_stdin() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                let mut buf = vec![0u8; 8192];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).to_string();
                let body = if req.contains("Authorization: Bearer sk-test")
                    && req.starts_with("POST /v1/chat/completions")
                {
                    r#"{"choices":[{"message":{"content":"<think>7+6</think>703"},"finish_reason":"stop"}]}"#
                } else {
                    r#"{"error": "Unauthorized"}"#
                };
                let _ = s
                    .write_all(
                        format!(
                            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                            body.len()
                        )
                        .as_bytes(),
                    )
                    .await;
            }
        });
        let body = serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "What's 417 + 286?"}]});
        let s = script(&format!("http://127.0.0.1:{port}"), &body, 10);
        assert!(!s.contains("sk-test"));
        let shell = LocalShell::new(NodeName::new("local").unwrap());
        let out = shell
            .run(&s, header_stdin(Some("sk-test")), None)
            .await
            .unwrap();
        let r = parse(&out.stdout, 10).unwrap();
        assert_eq!((r.answer.as_str(), r.thinking.as_str()), ("703", "7+6"));
        let out = shell.run(&s, header_stdin(None), None).await.unwrap();
        assert!(parse(&out.stdout, 10).unwrap_err().contains("Unauthorized"));
    }
}
