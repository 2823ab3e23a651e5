//! The token probe: one short streamed completion, to tell an engine that generates from one
//! that only answers `/health` and `/v1/models`. [`script`] is the shell script that sends it on
//! a node (the head, over SSH); [`parse`] reads what the script printed into a [`TokenProbe`].
//!
//! The request is `POST /v1/completions` (every OpenAI-compatible engine serves it, whether the
//! model has a chat template or not) with `stream: true`, `max_tokens` [`MAX_TOKENS`] and
//! `temperature: 0`, bounded by `curl --max-time`. The API key never sits on a command line:
//! the script reads the header line (`Authorization: Bearer …`, or an empty line) from its
//! stdin ([`header_stdin`]) into a 0600 file for `curl -H @FILE`, as the readiness poll does.
//!
//! Every line curl prints is stamped with the node's clock (`$EPOCHREALTIME`, or `date
//! +%s.%N`), so the time to the first token is measured where the request is sent, without the
//! SSH round trip.
//!
//! Pure: builds text and reads text.

use std::fmt;

use serde::{Deserialize, Serialize};

use crate::model::script::quote;

/// The tokens asked for: enough that a whitespace-only first token is not the whole answer, few
/// enough to cost nothing.
pub const MAX_TOKENS: u32 = 4;

/// The prompt: plain text any model continues.
pub const PROMPT: &str = "The capital of France is";

/// What one probe found.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "result", rename_all = "kebab-case")]
pub enum TokenProbe {
    /// A streamed chunk carried text. `after_ms`: from sending the request to that chunk, by
    /// the node's clock (`None` when the node's shell gave no readable clock).
    Token { after_ms: Option<u64> },
    /// The stream ended (200, `[DONE]` or closed) without any text.
    Empty,
    /// The engine refused or broke: an HTTP error, an error event in the stream, a refused
    /// connection. The engine's message, shortened.
    Failed(String),
    /// No token within the bound (`curl --max-time`): the engine may still answer `/health`,
    /// but generates nothing (a wedge, or still starting).
    NoAnswer { waited_s: u64 },
}

impl TokenProbe {
    pub fn is_token(&self) -> bool {
        matches!(self, TokenProbe::Token { .. })
    }
}

impl fmt::Display for TokenProbe {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TokenProbe::Token {
                after_ms: Some(ms), ..
            } => write!(f, "a token after {ms} ms"),
            TokenProbe::Token { after_ms: None } => write!(f, "a token"),
            TokenProbe::Empty => write!(f, "an empty generation (the stream ended without text)"),
            TokenProbe::Failed(why) => write!(f, "generation failed: {why}"),
            TokenProbe::NoAnswer { waited_s } => write!(f, "no token within {waited_s}s"),
        }
    }
}

/// The script's stdin: the header line with the API key, or an empty line.
pub fn header_stdin(api_key: Option<&str>) -> Vec<u8> {
    match api_key {
        Some(k) => format!("Authorization: Bearer {k}\n").into_bytes(),
        None => b"\n".to_vec(),
    }
}

/// The request body: the served model's name, the prompt, a few streamed tokens.
pub fn body(model: &str) -> String {
    serde_json::json!({
        "model": model,
        "prompt": PROMPT,
        "max_tokens": MAX_TOKENS,
        "temperature": 0,
        "stream": true,
    })
    .to_string()
}

/// The bash script that sends one streamed completion to `url` (the API's base,
/// `http://HOST:PORT`) for `model` (the served name), waiting at most `max_time_s`. It prints
/// `start T`, then `T LINE` for every line curl printed (the SSE lines, then `status CODE`),
/// then `curl EXIT` and `curlerr MESSAGE`. The API key comes on stdin ([`header_stdin`]).
pub fn script(url: &str, model: &str, max_time_s: u64) -> String {
    let url = quote(&format!("{}/v1/completions", url.trim_end_matches('/')));
    let body = quote(&body(model));
    let max_time = max_time_s.max(1);
    format!(
        r#"command -v curl >/dev/null || {{ echo "curl is not installed on this node" >&2; exit 127; }}
T=$(umask 077; mktemp -d) || exit 1
trap 'rm -rf "$T"' EXIT
IFS= read -r hdr || hdr=
: > "$T/h"
[ -n "$hdr" ] && printf '%s\n' "$hdr" > "$T/h"
if [ -n "${{EPOCHREALTIME:-}}" ]; then now() {{ t=${{EPOCHREALTIME/,/.}}; }}; else now() {{ t=$(date +%s.%N); }}; fi
now; printf 'start %s\n' "$t"
curl -sSN --max-time {max_time} -H @"$T/h" -H 'Content-Type: application/json' -d {body} -w '\nstatus %{{http_code}}\n' {url} 2>"$T/e" |
  while IFS= read -r l || [ -n "$l" ]; do now; printf '%s %s\n' "$t" "$l"; done
printf 'curl %s\n' "${{PIPESTATUS[0]}}"
printf 'curlerr %s\n' "$(head -c 300 "$T/e" | tr '\n' ' ')"
"#
    )
}

/// Reads [`script`]'s output. `max_time_s` is the bound the script was built with (named in
/// [`TokenProbe::NoAnswer`]).
pub fn parse(out: &str, max_time_s: u64) -> TokenProbe {
    let mut start: Option<f64> = None;
    let mut status: Option<u16> = None;
    let mut curl_exit: Option<i32> = None;
    let mut curl_err = String::new();
    let mut token_at: Option<Option<f64>> = None;
    let mut error_event: Option<String> = None;
    let mut body_lines: Vec<String> = Vec::new();
    for raw in out.lines() {
        let line = raw.trim_end_matches('\r');
        if let Some(t) = line.strip_prefix("start ") {
            start = t.trim().parse().ok();
            continue;
        }
        if let Some(c) = line.strip_prefix("curl ") {
            curl_exit = c.trim().parse().ok();
            continue;
        }
        if let Some(e) = line.strip_prefix("curlerr ") {
            curl_err = e.trim().to_string();
            continue;
        }
        // `T LINE`: the node's time, then what curl printed.
        let (t, rest) = match line.split_once(' ') {
            Some((t, rest)) => (t.parse::<f64>().ok(), rest),
            None => (line.parse::<f64>().ok(), ""),
        };
        let rest = rest.trim_end_matches('\r');
        if let Some(code) = rest.strip_prefix("status ") {
            status = code.trim().parse().ok();
            continue;
        }
        let Some(data) = rest.strip_prefix("data:") else {
            if !rest.trim().is_empty() {
                body_lines.push(rest.trim().to_string());
            }
            continue;
        };
        let data = data.trim();
        if data == "[DONE]" {
            continue;
        }
        match chunk(data) {
            Chunk::Text if token_at.is_none() => token_at = Some(t),
            Chunk::Error(msg) if error_event.is_none() => error_event = Some(msg),
            _ => {}
        }
    }
    if let Some(t) = token_at {
        let after_ms = match (start, t) {
            (Some(s), Some(t)) if t >= s => Some(((t - s) * 1000.0).round() as u64),
            _ => None,
        };
        return TokenProbe::Token { after_ms };
    }
    if let Some(e) = error_event {
        return TokenProbe::Failed(e);
    }
    match curl_exit {
        // CURLE_OPERATION_TIMEDOUT: the bound passed without a token.
        Some(28) => {
            return TokenProbe::NoAnswer {
                waited_s: max_time_s,
            };
        }
        Some(0) => {}
        Some(code) => {
            let why = if curl_err.is_empty() {
                format!("curl exited with code {code}")
            } else {
                curl_err
            };
            return TokenProbe::Failed(short(&why));
        }
        None => return TokenProbe::Failed(short(&format!("unreadable probe output: {out}"))),
    }
    match status {
        Some(200) => TokenProbe::Empty,
        Some(code) => {
            let body = body_lines.join(" ");
            let why = error_message(&body).unwrap_or(body);
            TokenProbe::Failed(short(&format!("HTTP {code}: {why}")))
        }
        None => TokenProbe::Failed("no HTTP status".into()),
    }
}

enum Chunk {
    Text,
    Error(String),
    Nothing,
}

/// One SSE data payload: text in a choice (`text` of a completion, `delta.content` or
/// `delta.reasoning_content` of a chat chunk), an error object, or neither (a role-only chat
/// chunk, a usage chunk, an empty text).
fn chunk(data: &str) -> Chunk {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(data) else {
        return Chunk::Nothing;
    };
    if let Some(msg) = error_message(data) {
        return Chunk::Error(short(&msg));
    }
    let has_text = v["choices"].as_array().is_some_and(|cs| {
        cs.iter().any(|c| {
            [
                &c["text"],
                &c["delta"]["content"],
                &c["delta"]["reasoning_content"],
            ]
            .iter()
            .any(|s| s.as_str().is_some_and(|s| !s.is_empty()))
        })
    });
    if has_text {
        Chunk::Text
    } else {
        Chunk::Nothing
    }
}

/// The message of an OpenAI error body (`{"error": {"message": …}}`, `{"error": "…"}`,
/// `{"message": …}`), if it is one.
fn error_message(body: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_str(body).ok()?;
    match &v["error"] {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Object(o) => Some(
            o.get("message")
                .and_then(|m| m.as_str())
                .map(str::to_string)
                .unwrap_or_else(|| serde_json::Value::Object(o.clone()).to_string()),
        ),
        _ => v["message"].as_str().map(str::to_string),
    }
}

fn short(s: &str) -> String {
    let mut out: String = s.chars().take(300).collect();
    if s.chars().count() > 300 {
        out.push('…');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::NodeName;
    use crate::runtime::shell::{LocalShell, NodeShell};

    /// What the script prints against the serving stand-in (tests/standin/vllm,
    /// `generate`: one `data:` event per token, `" tok{i}"`, then `[DONE]`; chunked
    /// transfer), captured from a run of [`script`] against it.
    const STANDIN: &str = "start 1795714956.026592
1795714956.137272 data: {\"id\": \"cmpl-61ed3e1c1f2a7\", \"object\": \"text_completion\", \"created\": 1795714956, \"model\": \"Qwen/Qwen2.5-0.5B-Instruct\", \"choices\": [{\"index\": 0, \"text\": \" tok0\", \"logprobs\": null, \"finish_reason\": null}]}
1795714956.137337 
1795714956.157827 data: {\"id\": \"cmpl-61ed3e1c1f2a7\", \"object\": \"text_completion\", \"created\": 1795714956, \"model\": \"Qwen/Qwen2.5-0.5B-Instruct\", \"choices\": [{\"index\": 0, \"text\": \" tok1\", \"logprobs\": null, \"finish_reason\": null}]}
1795714956.157905 
1795714956.178406 data: {\"id\": \"cmpl-61ed3e1c1f2a7\", \"object\": \"text_completion\", \"created\": 1795714956, \"model\": \"Qwen/Qwen2.5-0.5B-Instruct\", \"choices\": [{\"index\": 0, \"text\": \" tok2\", \"logprobs\": null, \"finish_reason\": null}]}
1795714956.178495 
1795714956.202785 data: {\"id\": \"cmpl-61ed3e1c1f2a7\", \"object\": \"text_completion\", \"created\": 1795714956, \"model\": \"Qwen/Qwen2.5-0.5B-Instruct\", \"choices\": [{\"index\": 0, \"text\": \" tok3\", \"logprobs\": null, \"finish_reason\": \"length\"}]}
1795714956.202864 
1795714956.202892 data: [DONE]
1795714956.202904 
1795714956.203480 
1795714956.203506 status 200
curl 0
curlerr 
";

    /// vLLM's documented stream (OpenAI completions, `stream: true`): chunks with
    /// `choices[].text`, `stop_reason`, `usage: null`, then `data: [DONE]`.
    const VLLM: &str = "start 1764179000,000000
1764179000.350000 data: {\"id\":\"cmpl-9f\",\"object\":\"text_completion\",\"created\":1764179000,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":\" Paris\",\"logprobs\":null,\"finish_reason\":null,\"stop_reason\":null}],\"usage\":null}
1764179000.350010 
1764179000.360000 data: [DONE]
1764179000.360010 
1764179000.360020 
1764179000.360030 status 200
curl 0
curlerr 
";

    #[test]
    fn a_streamed_token_is_timed_by_the_nodes_clock() {
        assert_eq!(
            parse(STANDIN, 30),
            TokenProbe::Token {
                after_ms: Some(111)
            }
        );
    }

    #[test]
    fn vllms_documented_stream_gives_a_token_and_an_unreadable_clock_no_time() {
        // The script turns a locale's decimal comma into a point; a start line that still
        // cannot be read leaves the time unknown, not invented.
        assert_eq!(parse(VLLM, 30), TokenProbe::Token { after_ms: None });
        let fixed = VLLM.replace("start 1764179000,000000", "start 1764179000.000000");
        assert_eq!(
            parse(&fixed, 30),
            TokenProbe::Token {
                after_ms: Some(350)
            }
        );
    }

    #[test]
    fn a_stream_without_text_is_an_empty_generation() {
        let out = "start 1.0
1.1 data: {\"choices\":[{\"index\":0,\"text\":\"\",\"finish_reason\":\"stop\"}]}
1.2 data: {\"choices\":[],\"usage\":{\"completion_tokens\":1}}
1.3 data: [DONE]
1.4 status 200
curl 0
curlerr 
";
        assert_eq!(parse(out, 30), TokenProbe::Empty);
        // A chat stream's role-only first chunk is no token either.
        let chat = "start 1.0
1.1 data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}
1.2 data: [DONE]
1.3 status 200
curl 0
curlerr 
";
        assert_eq!(parse(chat, 30), TokenProbe::Empty);
        let chat = chat.replace(
            "\"content\":\"\"}",
            "\"content\":\"\"}},{\"delta\":{\"content\":\"Hi\"}",
        );
        assert!(parse(&chat, 30).is_token());
    }

    #[test]
    fn an_error_event_or_status_is_a_failed_generation_with_the_engines_message() {
        // vLLM's streaming error: an `error` object as a data event, then [DONE].
        let out = "start 1.0
1.1 data: {\"error\": {\"object\": \"error\", \"message\": \"CUDA error: an illegal memory access was encountered\", \"type\": \"InternalServerError\", \"param\": null, \"code\": 500}}
1.2 data: [DONE]
1.3 status 200
curl 0
curlerr 
";
        assert_eq!(
            parse(out, 30),
            TokenProbe::Failed("CUDA error: an illegal memory access was encountered".into())
        );
        // The stand-in's (and vLLM's) 401 without the key; a 404 for another model.
        let out = "start 1.0
1.1 {\"error\": \"Unauthorized\"}
1.2 status 401
curl 0
curlerr 
";
        assert_eq!(
            parse(out, 30),
            TokenProbe::Failed("HTTP 401: Unauthorized".into())
        );
        let out = "start 1.0
1.1 {\"error\": {\"message\": \"The model `x` does not exist.\"}}
1.2 status 404
curl 0
curlerr 
";
        assert_eq!(
            parse(out, 30),
            TokenProbe::Failed("HTTP 404: The model `x` does not exist.".into())
        );
    }

    #[test]
    fn a_timeout_without_a_token_is_no_answer_and_a_refused_connection_fails() {
        let out = "start 1.0
31.0 
31.0 status 200
curl 28
curlerr curl: (28) Operation timed out after 30001 milliseconds with 0 bytes received
";
        assert_eq!(parse(out, 30), TokenProbe::NoAnswer { waited_s: 30 });
        let out = "start 1.0
1.0 
1.0 status 000
curl 7
curlerr curl: (7) Failed to connect to 127.0.0.1 port 1 after 0 ms: Couldn't connect to server
";
        assert_eq!(
            parse(out, 30),
            TokenProbe::Failed(
                "curl: (7) Failed to connect to 127.0.0.1 port 1 after 0 ms: Couldn't connect to server"
                    .into()
            )
        );
        assert!(matches!(parse("", 30), TokenProbe::Failed(_)));
    }

    #[test]
    fn the_key_is_never_in_the_script() {
        let s = script("http://10.0.0.1:8000/", "org/m", 20);
        assert!(s.contains("'http://10.0.0.1:8000/v1/completions'"));
        assert!(s.contains("--max-time 20"));
        assert!(s.contains(r#""model":"org/m""#));
        assert!(!s.contains("Bearer"));
        assert_eq!(
            header_stdin(Some("sk-1")),
            b"Authorization: Bearer sk-1\n".to_vec()
        );
    }

    /// A real HTTP server answering as the stand-in does (chunked SSE, one token), asked by
    /// the real script with the key on stdin.
    #[tokio::test]
    async fn the_script_reads_a_real_stream_and_sends_the_key_from_stdin() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = l.local_addr().unwrap().port();
        tokio::spawn(async move {
            loop {
                let Ok((mut s, _)) = l.accept().await else {
                    return;
                };
                let mut buf = vec![0u8; 4096];
                let n = s.read(&mut buf).await.unwrap_or(0);
                let req = String::from_utf8_lossy(&buf[..n]).to_string();
                if !req.contains("Authorization: Bearer sk-test") {
                    let body = "{\"error\": \"Unauthorized\"}";
                    let _ = s
                        .write_all(
                            format!("HTTP/1.1 401 Unauthorized\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}", body.len())
                                .as_bytes(),
                        )
                        .await;
                    continue;
                }
                let mut out = String::from(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n",
                );
                for data in [
                    "data: {\"choices\": [{\"index\": 0, \"text\": \" tok0\", \"finish_reason\": \"length\"}]}\n\n",
                    "data: [DONE]\n\n",
                ] {
                    out.push_str(&format!("{:x}\r\n{data}\r\n", data.len()));
                }
                out.push_str("0\r\n\r\n");
                let _ = s.write_all(out.as_bytes()).await;
            }
        });
        let shell = LocalShell::new(NodeName::new("local").unwrap());
        let url = format!("http://127.0.0.1:{port}");
        let out = shell
            .run(&script(&url, "m", 10), header_stdin(Some("sk-test")), None)
            .await
            .unwrap();
        let got = parse(&out.stdout, 10);
        assert!(
            matches!(got, TokenProbe::Token { after_ms: Some(_) }),
            "{got:?}\n{}",
            out.stdout
        );
        let out = shell
            .run(&script(&url, "m", 10), header_stdin(None), None)
            .await
            .unwrap();
        assert_eq!(
            parse(&out.stdout, 10),
            TokenProbe::Failed("HTTP 401: Unauthorized".into())
        );
    }
}
