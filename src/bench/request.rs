//! What `bench` sends and how it reads the answer, as data: the endpoint's base URL, prompts of
//! a fixed length generated here (no data set to download), the body of one streaming
//! completion, and the server-sent events of the stream turned into tokens and usage.
//!
//! Pure: text and bytes in, values out. Sending is `bench::client`'s job.

use std::fmt;

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

/// Which OpenAI endpoint the requests go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    /// `/v1/completions`: the prompt exactly as generated (no chat template around it).
    Completions,
    /// `/v1/chat/completions`: one user message (the server's chat template adds tokens).
    Chat,
}

impl Api {
    /// The path under the base URL.
    pub fn path(self) -> &'static str {
        match self {
            Api::Completions => "completions",
            Api::Chat => "chat/completions",
        }
    }
}

impl fmt::Display for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Api::Completions => "completions",
            Api::Chat => "chat",
        })
    }
}

/// An OpenAI-compatible API's base URL, `http://HOST:PORT/v1`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BaseUrl {
    pub host: String,
    pub port: u16,
    /// The path prefix without a trailing `/` (`/v1`).
    pub path: String,
}

impl BaseUrl {
    /// `http://host:port[/prefix]`; without a path the prefix is `/v1` (what every
    /// OpenAI-compatible server spark-launch starts serves under).
    pub fn parse(url: &str) -> Result<BaseUrl, String> {
        let url = url.trim();
        if url.starts_with("https://") {
            return Err(format!(
                "{url:?}: bench speaks plain HTTP (the engines spark-launch starts serve http://); \
                 give the server's http:// address, or reach an https-only server through a local proxy"
            ));
        }
        let rest = url.strip_prefix("http://").ok_or_else(|| {
            format!("{url:?} is not an http:// URL (e.g. http://10.0.0.1:8000/v1)")
        })?;
        let (authority, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6
                .split_once(']')
                .ok_or_else(|| format!("{url:?}: an IPv6 address needs its closing ']'"))?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| format!("{url:?}: bad port {p:?}"))?,
                None if after.is_empty() => 80,
                None => return Err(format!("{url:?}: unexpected {after:?} after the address")),
            };
            (h.to_string(), port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (
                    h.to_string(),
                    p.parse().map_err(|_| format!("{url:?}: bad port {p:?}"))?,
                ),
                None => (authority.to_string(), 80),
            }
        };
        if host.is_empty() {
            return Err(format!("{url:?} names no host"));
        }
        if path.contains(['?', '#']) {
            return Err(format!(
                "{url:?}: give the API's base URL without a query (e.g. http://10.0.0.1:8000/v1)"
            ));
        }
        let path = path.trim_end_matches('/');
        Ok(BaseUrl {
            host,
            port,
            path: if path.is_empty() {
                "/v1".to_string()
            } else {
                path.to_string()
            },
        })
    }

    /// The base URL of a server on `host:port` (a job's head).
    pub fn of(host: impl Into<String>, port: u16) -> BaseUrl {
        BaseUrl {
            host: host.into(),
            port,
            path: "/v1".to_string(),
        }
    }

    /// `host:port` as the `Host` header wants it.
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }

    /// The request path of `tail` under the base (`models` → `/v1/models`).
    pub fn path_of(&self, tail: &str) -> String {
        format!("{}/{}", self.path, tail.trim_start_matches('/'))
    }
}

impl fmt::Display for BaseUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "http://{}{}", self.authority(), self.path)
    }
}

/// Common short English words: each is one token in the tokenizers of the models people serve
/// (Llama, Qwen, Mistral, gpt-oss), so `n` words make a prompt of about `n` tokens.
const WORDS: [&str; 64] = [
    "the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "was", "with", "be", "by",
    "on", "not", "he", "this", "are", "or", "his", "from", "at", "which", "but", "have", "an",
    "had", "they", "you", "were", "their", "one", "all", "we", "can", "her", "has", "there",
    "been", "if", "more", "when", "will", "would", "who", "so", "no", "time", "people", "year",
    "way", "day", "man", "thing", "life", "world", "school", "state", "family", "group", "water",
    "room", "book",
];

/// A deterministic stream of numbers (splitmix64): the same seed, the same prompt.
fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A prompt of `words` words (≈ tokens) drawn from `seed`. Different seeds differ from the
/// first word on, so no request shares a cached prefix with another (prefix caching would
/// otherwise make every request after the first look fast).
pub fn prompt(seed: u64, words: u32) -> String {
    let mut state = seed;
    let mut out = String::with_capacity(words as usize * 6);
    for i in 0..words {
        if i > 0 {
            out.push(' ');
        }
        let w = WORDS[(splitmix(&mut state) % WORDS.len() as u64) as usize];
        out.push_str(w);
    }
    out
}

/// The body of one streaming request: exactly `output_tokens` tokens asked for (`max_tokens`,
/// and vLLM's / TensorRT-LLM's `min_tokens` and `ignore_eos`, so an early end-of-sequence
/// does not shorten it), greedy, with the usage reported at the end of the stream.
pub fn body(api: Api, model: &str, prompt: &str, output_tokens: u32) -> Value {
    let mut b = json!({
        "model": model,
        "max_tokens": output_tokens,
        "min_tokens": output_tokens,
        "ignore_eos": true,
        "temperature": 0.0,
        "stream": true,
        "stream_options": {"include_usage": true},
    });
    match api {
        Api::Completions => b["prompt"] = json!(prompt),
        Api::Chat => b["messages"] = json!([{"role": "user", "content": prompt}]),
    }
    b
}

/// The token counts a server reported for one request.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: Option<u32>,
    pub completion_tokens: Option<u32>,
}

/// What one event of the stream carried.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// A chunk; `text` when it carried generated text (a chat stream's first chunk often
    /// carries only the role), `usage` when the server reported the counts in it, `finished`
    /// when a choice gave its `finish_reason` (the generation's own end).
    Chunk {
        text: bool,
        usage: Option<Usage>,
        finished: bool,
    },
    /// `data: [DONE]`.
    Done,
    /// The server reported an error inside the stream.
    Error(String),
}

/// Reads one event's `data` payload.
pub fn parse_event(data: &str) -> Event {
    let data = data.trim();
    if data == "[DONE]" {
        return Event::Done;
    }
    let v: Value = match serde_json::from_str(data) {
        Ok(v) => v,
        Err(e) => return Event::Error(format!("unreadable event ({e}): {}", clip(data, 200))),
    };
    if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
        let msg = err
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_string)
            .unwrap_or_else(|| err.to_string());
        return Event::Error(msg);
    }
    let text = v
        .get("choices")
        .and_then(Value::as_array)
        .is_some_and(|choices| {
            choices.iter().any(|c| {
                let piece = c
                    .get("text")
                    .or_else(|| c.get("delta").and_then(|d| d.get("content")));
                piece.and_then(Value::as_str).is_some_and(|s| !s.is_empty())
            })
        });
    let finished = v
        .get("choices")
        .and_then(Value::as_array)
        .is_some_and(|choices| {
            choices.iter().any(|c| {
                c.get("finish_reason")
                    .and_then(Value::as_str)
                    .is_some_and(|r| !r.is_empty())
            })
        });
    let usage = v.get("usage").filter(|u| u.is_object()).map(|u| Usage {
        prompt_tokens: u
            .get("prompt_tokens")
            .and_then(Value::as_u64)
            .map(|n| n as u32),
        completion_tokens: u
            .get("completion_tokens")
            .and_then(Value::as_u64)
            .map(|n| n as u32),
    });
    Event::Chunk {
        text,
        usage,
        finished,
    }
}

/// What a chunk carried, in the detail a protocol's metrics need.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ChunkDetail {
    /// It had a choice (the first such chunk is a response, even without text).
    pub choice: bool,
    /// Its choice carried generated content or reasoning (`reasoning_content`, `reasoning`).
    pub generated: bool,
    /// The token ids it carried (`return_token_ids`), when it carried them.
    pub token_ids: Option<u32>,
}

/// Reads one event's payload for [`ChunkDetail`]; `None` for anything but a chunk.
pub fn chunk_detail(data: &str) -> Option<ChunkDetail> {
    let v: Value = serde_json::from_str(data.trim()).ok()?;
    let choice = v.get("choices")?.as_array()?.first()?;
    let piece = |c: &Value| c.as_str().is_some_and(|s| !s.is_empty());
    let delta = choice.get("delta");
    let generated = choice.get("text").is_some_and(piece)
        || ["content", "reasoning_content", "reasoning"]
            .iter()
            .any(|k| delta.and_then(|d| d.get(*k)).is_some_and(piece));
    Some(ChunkDetail {
        choice: true,
        generated,
        token_ids: choice
            .get("token_ids")
            .and_then(Value::as_array)
            .map(|a| a.len() as u32),
    })
}

/// Splits a byte stream into server-sent events' `data:` payloads, across chunk boundaries,
/// and keeps the first line that is no line of an event stream (random bytes, an HTML page).
#[derive(Debug, Default)]
pub struct EventReader {
    pending: Vec<u8>,
    /// The first line that is neither a field of an event (`data:`, `event:`, `id:`,
    /// `retry:`), a comment (`:`) nor blank, clipped and printable.
    foreign: Option<String>,
}

/// The longest line kept pending: a stream of bytes with no line end is no event stream.
const LINE_MAX: usize = 1 << 20;

impl EventReader {
    /// Feeds bytes; returns every complete `data:` line they finished.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<String> {
        self.pending.extend_from_slice(bytes);
        let mut out = Vec::new();
        while let Some(i) = self.pending.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=i).collect();
            let line = String::from_utf8_lossy(&line);
            let line = line.trim_end_matches(['\n', '\r']);
            if let Some(data) = line.strip_prefix("data:") {
                out.push(data.trim_start().to_string());
            } else {
                self.note(line);
            }
        }
        if self.pending.len() > LINE_MAX {
            let line: Vec<u8> = std::mem::take(&mut self.pending);
            self.note(&String::from_utf8_lossy(&line));
        }
        out
    }

    /// Keeps `line` when it is the first that belongs to no event stream.
    fn note(&mut self, line: &str) {
        let field = line.split(':').next().unwrap_or(line);
        let sse = line.is_empty()
            || line.starts_with(':')
            || matches!(field, "data" | "event" | "id" | "retry");
        if !sse && self.foreign.is_none() {
            self.foreign = Some(crate::text::printable(&clip(line, 80)).into_owned());
        }
    }

    /// The stream ended: the first line that was no part of an event stream, counting what
    /// was still pending without a line end.
    pub fn foreign(&mut self) -> Option<&str> {
        if !self.pending.is_empty() {
            let rest = std::mem::take(&mut self.pending);
            self.note(&String::from_utf8_lossy(&rest));
        }
        self.foreign.as_deref()
    }
}

/// How a stream ended, as the client saw it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamEnd {
    /// `data:` events received.
    pub events: usize,
    /// Chunks of generated text received.
    pub tokens: usize,
    /// It ended as a generation ends: `data: [DONE]`, or a choice's `finish_reason` before
    /// the body closed.
    pub proper_end: bool,
}

/// Whether a streamed answer counts as a finished request: only a well-formed event stream
/// with at least one token and its proper end does. A 200 whose body is no event stream
/// (`foreign`: its first line that is none), that closes before its end, or that ends without
/// a token is a failure with that reason, never a request measured at 0 tokens/s.
pub fn judge_stream(end: StreamEnd, foreign: Option<&str>) -> Result<(), String> {
    match (end.events, foreign) {
        (0, Some(line)) => {
            return Err(format!(
                "the answer was not a stream of server-sent events (it began {line:?})"
            ));
        }
        (0, None) if !end.proper_end => {
            return Err("the stream closed before any event".to_string());
        }
        _ => {}
    }
    if !end.proper_end {
        return Err(format!(
            "the stream closed before its end (no [DONE] and no finish_reason) after {} token{}",
            end.tokens,
            if end.tokens == 1 { "" } else { "s" }
        ));
    }
    if end.tokens == 0 {
        return Err("the stream ended without a single token of text".to_string());
    }
    Ok(())
}

/// The first `n` characters of `s`, marked when cut.
pub fn clip(s: &str, n: usize) -> String {
    let s = s.trim();
    match s.char_indices().nth(n) {
        Some((i, _)) => format!("{}…", &s[..i]),
        None => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_base_url_defaults_to_v1_and_keeps_a_given_prefix() {
        let u = BaseUrl::parse("http://10.0.0.1:8000").unwrap();
        assert_eq!(u.to_string(), "http://10.0.0.1:8000/v1");
        assert_eq!(u.path_of("models"), "/v1/models");
        let u = BaseUrl::parse("http://box/openai/v1/").unwrap();
        assert_eq!((u.port, u.path.as_str()), (80, "/openai/v1"));
        let u = BaseUrl::parse("http://[fe80::1]:8355/v1").unwrap();
        assert_eq!(u.authority(), "[fe80::1]:8355");
        assert!(
            BaseUrl::parse("https://api.example.com/v1")
                .unwrap_err()
                .contains("plain HTTP")
        );
        assert!(
            BaseUrl::parse("10.0.0.1:8000")
                .unwrap_err()
                .contains("http://")
        );
        assert!(BaseUrl::parse("http://:8000/v1").is_err());
        assert!(
            BaseUrl::parse("http://h:port/v1")
                .unwrap_err()
                .contains("bad port")
        );
    }

    #[test]
    fn prompts_have_the_asked_length_and_differ_by_seed_from_the_first_word() {
        let a = prompt(1, 100);
        assert_eq!(a.split(' ').count(), 100);
        assert_eq!(a, prompt(1, 100));
        let firsts: std::collections::BTreeSet<String> = (0..32)
            .map(|s| {
                prompt(s, 4)
                    .split(' ')
                    .take(2)
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        assert!(firsts.len() > 28, "{firsts:?}");
        assert_eq!(prompt(3, 0), "");
    }

    #[test]
    fn the_request_body_asks_for_exactly_the_output_length_and_the_usage() {
        insta::assert_json_snapshot!(
            "completions_body",
            body(
                Api::Completions,
                "Qwen/Qwen2.5-0.5B-Instruct",
                "the of and",
                128
            )
        );
        insta::assert_json_snapshot!("chat_body", body(Api::Chat, "m", "hello there", 16));
    }

    #[test]
    fn events_split_across_reads_are_put_back_together() {
        let mut r = EventReader::default();
        assert!(r.push(b"data: {\"choices\":[{\"te").is_empty());
        let got = r.push(b"xt\":\"a\"}]}\r\n\r\ndata: [DONE]\n\n: keep-alive\n");
        assert_eq!(got, vec![r#"{"choices":[{"text":"a"}]}"#, "[DONE]"]);
    }

    #[test]
    fn a_chunks_detail_says_response_reasoning_and_token_ids() {
        let d = |s| chunk_detail(s);
        assert_eq!(
            d(r#"{"choices":[{"delta":{"role":"assistant","content":""}}]}"#),
            Some(ChunkDetail {
                choice: true,
                generated: false,
                token_ids: None
            })
        );
        assert_eq!(
            d(r#"{"choices":[{"delta":{"reasoning_content":"hm"},"token_ids":[5,6]}]}"#),
            Some(ChunkDetail {
                choice: true,
                generated: true,
                token_ids: Some(2)
            })
        );
        assert_eq!(d(r#"{"choices":[],"usage":{"prompt_tokens":3}}"#), None);
        assert_eq!(d("[DONE]"), None);
    }

    #[test]
    fn chunks_say_whether_they_carried_text_and_usage() {
        assert_eq!(
            parse_event(r#"{"choices":[{"index":0,"text":" tok"}]}"#),
            Event::Chunk {
                text: true,
                usage: None,
                finished: false
            }
        );
        // A chat stream's first chunk names the role only; vLLM sends `usage: null` meanwhile.
        assert_eq!(
            parse_event(
                r#"{"choices":[{"delta":{"role":"assistant","content":""}}],"usage":null}"#
            ),
            Event::Chunk {
                text: false,
                usage: None,
                finished: false
            }
        );
        assert_eq!(
            parse_event(r#"{"choices":[],"usage":{"prompt_tokens":12,"completion_tokens":128}}"#),
            Event::Chunk {
                text: false,
                usage: Some(Usage {
                    prompt_tokens: Some(12),
                    completion_tokens: Some(128)
                }),
                finished: false
            }
        );
        // The generation's own end: vLLM's last text chunk names why it stopped.
        assert_eq!(
            parse_event(r#"{"choices":[{"index":0,"text":"!","finish_reason":"length"}]}"#),
            Event::Chunk {
                text: true,
                usage: None,
                finished: true
            }
        );
        assert_eq!(parse_event("[DONE]"), Event::Done);
        assert_eq!(
            parse_event(r#"{"error":{"message":"out of KV cache"}}"#),
            Event::Error("out of KV cache".into())
        );
        assert!(matches!(parse_event("not json"), Event::Error(_)));
    }

    #[test]
    fn a_stream_counts_only_with_events_a_token_and_its_proper_end() {
        let end = |events, tokens, proper_end| StreamEnd {
            events,
            tokens,
            proper_end,
        };
        assert_eq!(judge_stream(end(18, 16, true), None), Ok(()));
        // Random bytes with a 200: no event at all.
        let mut r = EventReader::default();
        assert!(r.push(b"\x8f\x01garbage\xffmore\nand more").is_empty());
        let foreign = r.foreign().map(str::to_string);
        let e = judge_stream(end(0, 0, false), foreign.as_deref()).unwrap_err();
        assert!(
            e.starts_with("the answer was not a stream of server-sent events"),
            "{e}"
        );
        // Cut after a few tokens: no [DONE], no finish_reason.
        let e = judge_stream(end(3, 3, false), None).unwrap_err();
        assert!(
            e.contains("closed before its end") && e.contains("after 3 tokens"),
            "{e}"
        );
        assert_eq!(
            judge_stream(end(0, 0, false), None).unwrap_err(),
            "the stream closed before any event"
        );
        // [DONE] straight away: ended, but nothing was generated.
        let e = judge_stream(end(1, 0, true), None).unwrap_err();
        assert!(e.contains("without a single token"), "{e}");
        // Comments, ids and blank lines belong to an event stream.
        let mut r = EventReader::default();
        r.push(b": keep-alive\nid: 4\nevent: message\n\nretry: 10\n");
        assert_eq!(r.foreign(), None);
    }
}
