//! Termination: an answer ends because the model stopped (`finish_reason` `stop`), not
//! because it ran into the token limit (`length`); a reasoning model's think section closes
//! within the token budget and an answer follows. Pure.

use super::reply::Reply;

/// How one reply ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HowItEnded {
    /// The model stopped by itself.
    Stopped,
    /// The token limit ended it; `thinking` when the think section never closed.
    Limit { thinking: bool },
    /// The server gave no `finish_reason`, or one that says neither: not known.
    Unknown(String),
}

/// How `reply` ended.
pub fn ending(reply: &Reply) -> HowItEnded {
    match reply.finish_reason.as_deref() {
        Some("stop") => HowItEnded::Stopped,
        Some("length") => HowItEnded::Limit {
            // The section stayed open, or a reasoning parser took it all and no answer came.
            thinking: reply.think_open || (!reply.thinking.is_empty() && reply.answer.is_empty()),
        },
        Some(other) => HowItEnded::Unknown(format!("the server ended it with {other:?}")),
        None => HowItEnded::Unknown("the server gave no finish_reason".into()),
    }
}

/// What an ending means, in a sentence, for `budget` tokens asked at most.
pub fn explain(reply: &Reply, budget: u32) -> String {
    let tokens = reply
        .completion_tokens
        .map(|n| format!("{n} tokens"))
        .unwrap_or_else(|| "tokens not reported".into());
    match ending(reply) {
        HowItEnded::Stopped if reply.thinking.is_empty() => format!("stopped by itself ({tokens})"),
        HowItEnded::Stopped => format!(
            "thought ({} words), then answered and stopped ({tokens})",
            reply.thinking.split_whitespace().count()
        ),
        HowItEnded::Limit { thinking: true } => {
            format!("still thinking at the token limit ({budget}): the think section never closed")
        }
        HowItEnded::Limit { thinking: false } => {
            format!("ran into the token limit ({budget}) instead of stopping")
        }
        HowItEnded::Unknown(why) => why,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(answer: &str, thinking: &str, open: bool, finish: Option<&str>) -> Reply {
        Reply {
            answer: answer.into(),
            thinking: thinking.into(),
            think_open: open,
            finish_reason: finish.map(str::to_string),
            completion_tokens: Some(12),
        }
    }

    #[test]
    fn a_stop_ends_well_and_the_token_limit_does_not() {
        assert_eq!(
            ending(&reply("703", "", false, Some("stop"))),
            HowItEnded::Stopped
        );
        assert_eq!(
            ending(&reply("703 704 705", "", false, Some("length"))),
            HowItEnded::Limit { thinking: false }
        );
        assert!(explain(&reply("7", "", false, Some("length")), 64).contains("token limit (64)"));
    }

    #[test]
    fn thinking_that_never_closes_is_named() {
        let open = reply("", "hmm", true, Some("length"));
        assert_eq!(ending(&open), HowItEnded::Limit { thinking: true });
        assert!(explain(&open, 2048).contains("never closed"));
        // A reasoning parser that got no end of the section puts everything in the field.
        let parsed = reply("", "hmm hmm", false, Some("length"));
        assert_eq!(ending(&parsed), HowItEnded::Limit { thinking: true });
        let closed = reply("703", "carry the one", false, Some("stop"));
        assert!(explain(&closed, 2048).starts_with("thought (3 words), then answered"));
    }

    #[test]
    fn an_ending_the_server_did_not_name_is_not_known() {
        assert!(matches!(
            ending(&reply("703", "", false, None)),
            HowItEnded::Unknown(_)
        ));
        assert!(matches!(
            ending(&reply("703", "", false, Some("abort"))),
            HowItEnded::Unknown(_)
        ));
    }
}
