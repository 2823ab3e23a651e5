//! One answer of the served model, read from the body of a chat completion
//! (`/v1/chat/completions`, not streamed): the text, its think section — `<think>…</think>` in
//! the text, or the `reasoning_content` / `reasoning` field a reasoning parser fills — apart
//! from the answer, how the generation ended (`finish_reason`) and the tokens it took. Pure.

use serde::Serialize;

/// A model's answer to one question.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Reply {
    /// The answer with its think section taken out, trimmed.
    pub answer: String,
    /// The think section's text (empty: none).
    pub thinking: String,
    /// The think section was opened and never closed (`<think>` without `</think>`).
    pub think_open: bool,
    /// `stop`, `length`, … as the server said; `None`: it did not say.
    pub finish_reason: Option<String>,
    pub completion_tokens: Option<u32>,
}

/// What came back for one question: the reply, or why there is none (an HTTP error with the
/// server's message, a timeout, a refused connection).
pub type Answered = Result<Reply, String>;

/// Reads an HTTP status and body into the reply, or the reason there is none.
pub fn parse(status: u16, body: &str) -> Answered {
    let v: serde_json::Value = match serde_json::from_str(body) {
        Ok(v) => v,
        Err(_) if status != 200 => return Err(format!("HTTP {status}: {}", super::cut(body))),
        Err(e) => {
            return Err(format!(
                "the answer is not JSON ({e}): {}",
                super::cut(body)
            ));
        }
    };
    if status != 200 || v.get("error").is_some() {
        let message = match &v["error"] {
            serde_json::Value::String(s) => s.clone(),
            serde_json::Value::Object(o) => o
                .get("message")
                .and_then(|m| m.as_str())
                .map(str::to_string)
                .unwrap_or_else(|| serde_json::Value::Object(o.clone()).to_string()),
            _ => v["detail"]
                .as_str()
                .or(v["message"].as_str())
                .map(str::to_string)
                .unwrap_or_else(|| super::cut(body)),
        };
        return Err(format!("HTTP {status}: {}", super::cut(&message)));
    }
    let Some(choice) = v["choices"].as_array().and_then(|c| c.first()) else {
        return Err(format!("the answer has no choices: {}", super::cut(body)));
    };
    let message = &choice["message"];
    // A completion (`text`) is read the same way as a chat message (`content`).
    let content = message["content"]
        .as_str()
        .or(choice["text"].as_str())
        .unwrap_or("");
    let field = message["reasoning_content"]
        .as_str()
        .or(message["reasoning"].as_str())
        .unwrap_or("");
    let (thinking, answer, think_open) = split_think(content);
    let thinking = [field.trim(), thinking.trim()]
        .into_iter()
        .filter(|t| !t.is_empty())
        .collect::<Vec<_>>()
        .join("\n");
    Ok(Reply {
        answer: answer.trim().to_string(),
        thinking,
        think_open,
        finish_reason: choice["finish_reason"].as_str().map(str::to_string),
        completion_tokens: v["usage"]["completion_tokens"]
            .as_u64()
            .and_then(|n| u32::try_from(n).ok()),
    })
}

/// Splits a text into its think section and the answer: `<think>T</think>A` gives (T, A);
/// `T</think>A` (the chat template opened the section in the prompt) gives (T, A); `<think>T`
/// that never closes gives (T, "", open).
pub fn split_think(content: &str) -> (String, String, bool) {
    const OPEN: &str = "<think>";
    const CLOSE: &str = "</think>";
    match (content.find(OPEN), content.find(CLOSE)) {
        (Some(o), Some(c)) if o < c => {
            let thinking = &content[o + OPEN.len()..c];
            let answer = format!("{}{}", &content[..o], &content[c + CLOSE.len()..]);
            (thinking.to_string(), answer, false)
        }
        (Some(o), _) => (
            content[o + OPEN.len()..].to_string(),
            content[..o].to_string(),
            true,
        ),
        (None, Some(c)) => (
            content[..c].to_string(),
            content[c + CLOSE.len()..].to_string(),
            false,
        ),
        (None, None) => (String::new(), content.to_string(), false),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_think_section_is_kept_apart_from_the_answer() {
        assert_eq!(
            split_think("<think>417 plus 286</think>\n\n703"),
            ("417 plus 286".into(), "\n\n703".into(), false)
        );
        assert_eq!(
            split_think("carry the one</think>703"),
            ("carry the one".into(), "703".into(), false)
        );
        assert_eq!(
            split_think("<think>hmm hmm"),
            ("hmm hmm".into(), "".into(), true)
        );
        assert_eq!(split_think("703"), ("".into(), "703".into(), false));
    }

    /// vLLM's chat completion with a reasoning parser (`reasoning_content`), as its OpenAI
    /// server documents it.
    #[test]
    fn a_reasoning_field_is_the_think_section() {
        let body = r#"{"id":"chatcmpl-1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"703","reasoning_content":"417 + 286: 7+6=13 ..."},"finish_reason":"stop"}],"usage":{"prompt_tokens":20,"completion_tokens":41}}"#;
        let r = parse(200, body).unwrap();
        assert_eq!(r.answer, "703");
        assert_eq!(r.thinking, "417 + 286: 7+6=13 ...");
        assert_eq!(r.finish_reason.as_deref(), Some("stop"));
        assert_eq!(r.completion_tokens, Some(41));
        assert!(!r.think_open);
    }

    #[test]
    fn an_error_is_no_reply_with_the_servers_message() {
        let e = parse(
            400,
            r#"{"object":"error","message":"This model's maximum context length is 4096 tokens.","type":"BadRequestError"}"#,
        )
        .unwrap_err();
        assert_eq!(
            e,
            "HTTP 400: This model's maximum context length is 4096 tokens."
        );
        assert_eq!(
            parse(401, r#"{"error": "Unauthorized"}"#).unwrap_err(),
            "HTTP 401: Unauthorized"
        );
        assert_eq!(
            parse(502, "Bad Gateway").unwrap_err(),
            "HTTP 502: Bad Gateway"
        );
        assert!(parse(200, "{}").unwrap_err().contains("no choices"));
    }
}
