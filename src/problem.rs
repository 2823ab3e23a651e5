//! One problem as the user reads it: what went wrong, why it matters, and the fix. Every
//! refusal and finding holds one; a type that says more (the node, the field, the kind) keeps
//! a `Problem` beside it instead of copies of these fields.
//!
//! Plain data, imports nothing of the crate. In JSON `what` is written `problem` (as every
//! output has always called it), `why` only when there is one, and the fix as its type writes
//! it: a sentence, `null` where a problem has none (`Problem<Option<String>>`), or doctor's
//! text with the commands to run.

use std::fmt;

use serde::{Deserialize, Serialize};

/// What went wrong, why it matters, and what to do about it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Problem<F = String> {
    #[serde(rename = "problem")]
    pub what: String,
    /// Empty where `what` already says why.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub why: String,
    pub fix: F,
}

impl Problem {
    /// A problem and the sentence that fixes it; no separate why.
    pub fn new(what: impl Into<String>, fix: impl Into<String>) -> Problem {
        Problem::with_fix(what, fix.into())
    }
}

impl<F> Problem<F> {
    /// A problem and its fix of any kind; no separate why.
    pub fn with_fix(what: impl Into<String>, fix: F) -> Problem<F> {
        Problem {
            what: what.into(),
            why: String::new(),
            fix,
        }
    }

    /// The same problem, saying why it matters.
    pub fn because(mut self, why: impl Into<String>) -> Problem<F> {
        self.why = why.into();
        self
    }
}

/// `what` (`why`), then the fix on its own indented line, as refusals print each problem.
impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.what)?;
        if !self.why.is_empty() {
            write!(f, "\n    why: {}", self.why)?;
        }
        write!(f, "\n    fix: {}", self.fix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_calls_what_problem_and_leaves_out_an_empty_why() {
        let p: Problem = Problem::new("port 8000 is taken", "stop what holds it");
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            serde_json::json!({"problem": "port 8000 is taken", "fix": "stop what holds it"})
        );
        let back: Problem = serde_json::from_value(serde_json::to_value(&p).unwrap()).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn a_problem_without_a_fix_writes_null() {
        let p: Problem<Option<String>> = Problem::with_fix("no answer", None);
        assert_eq!(
            serde_json::to_value(&p).unwrap(),
            serde_json::json!({"problem": "no answer", "fix": null})
        );
    }

    #[test]
    fn a_refusal_prints_the_problem_then_the_fix_indented() {
        let p: Problem = Problem::new("tp 3 does not divide 28 heads", "use tp 1, 2, 4 or 7");
        assert_eq!(
            p.to_string(),
            "tp 3 does not divide 28 heads\n    fix: use tp 1, 2, 4 or 7"
        );
        assert_eq!(
            p.because("each rank holds whole heads").to_string(),
            "tp 3 does not divide 28 heads\n    why: each rank holds whole heads\n    fix: use tp 1, 2, 4 or 7"
        );
    }
}
