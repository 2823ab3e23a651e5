//! The arithmetic questions of the check: sums, differences and products whose answers
//! spark-launch computes itself, drawn from a seed (so a model cannot have learnt them), and
//! the number read back from an answer. Pure.

use serde::Serialize;

/// One question and its right answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Sum {
    pub a: i64,
    pub op: char,
    pub b: i64,
}

impl Sum {
    /// The right answer, computed here.
    pub fn value(&self) -> i64 {
        match self.op {
            '+' => self.a + self.b,
            '-' => self.a - self.b,
            _ => self.a * self.b,
        }
    }

    /// `417 + 286`.
    pub fn expression(&self) -> String {
        format!("{} {} {}", self.a, self.op, self.b)
    }

    /// What the model is asked.
    pub fn prompt(&self) -> String {
        format!(
            "What is {}? Answer with the number only.",
            self.expression()
        )
    }
}

/// A deterministic stream of numbers (splitmix64): the same seed, the same questions.
pub(super) fn splitmix(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

fn between(state: &mut u64, lo: i64, hi: i64) -> i64 {
    lo + (splitmix(state) % (hi - lo + 1) as u64) as i64
}

/// Three questions from `seed`: a sum of two three-digit numbers, a difference with a
/// positive result, a product of two two-digit numbers.
pub fn questions(seed: u64) -> Vec<Sum> {
    let mut s = seed;
    let sum = Sum {
        a: between(&mut s, 100, 999),
        op: '+',
        b: between(&mut s, 100, 999),
    };
    let a = between(&mut s, 300, 999);
    let difference = Sum {
        a,
        op: '-',
        b: between(&mut s, 100, a - 1),
    };
    let product = Sum {
        a: between(&mut s, 12, 99),
        op: '*',
        b: between(&mut s, 12, 99),
    };
    vec![sum, difference, product]
}

/// Every integer written in `text`, in order: an optional minus sign, digits, and thousands
/// separators (`1,234`) between groups of three digits.
pub fn numbers(text: &str) -> Vec<i64> {
    let chars: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        if !chars[i].is_ascii_digit() {
            i += 1;
            continue;
        }
        let negative = i > 0
            && matches!(chars[i - 1], '-' | '−')
            && (i < 2 || !chars[i - 2].is_alphanumeric());
        let mut digits = String::new();
        while i < chars.len() {
            let c = chars[i];
            if c.is_ascii_digit() {
                digits.push(c);
                i += 1;
            } else if c == ','
                && chars
                    .get(i + 1..i + 4)
                    .is_some_and(|g| g.iter().all(char::is_ascii_digit))
                && !chars.get(i + 4).is_some_and(char::is_ascii_digit)
            {
                i += 1;
            } else {
                break;
            }
        }
        if let Ok(n) = digits.parse::<i64>() {
            out.push(if negative { -n } else { n });
        }
    }
    out
}

/// How an answer stands against the right value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reading {
    /// The answer's first or last number is the right one (`703`, `417 + 286 = 703`,
    /// `\boxed{703}`, `703 (417 + 286)`).
    Right,
    /// Numbers, but not the right one: the last one written.
    Wrong(i64),
    /// No number at all.
    NoNumber,
}

/// Reads the answer (its think section already removed) against `want`.
pub fn read(answer: &str, want: i64) -> Reading {
    let found = numbers(answer);
    match (found.first(), found.last()) {
        (Some(f), Some(l)) if *f == want || *l == want => Reading::Right,
        (_, Some(l)) => Reading::Wrong(*l),
        _ => Reading::NoNumber,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_asks_the_same_questions_and_their_answers_are_computed_here() {
        let q = questions(7);
        assert_eq!(q, questions(7));
        assert_ne!(q, questions(8));
        assert_eq!(q.len(), 3);
        for s in &q {
            assert!(s.prompt().starts_with("What is "), "{}", s.prompt());
            assert!(s.prompt().ends_with("? Answer with the number only."));
        }
        assert!(q[1].value() > 0, "a difference stays positive");
        let sum = Sum {
            a: 417,
            op: '+',
            b: 286,
        };
        assert_eq!(sum.value(), 703);
        assert_eq!(
            sum.prompt(),
            "What is 417 + 286? Answer with the number only."
        );
    }

    #[test]
    fn a_number_is_read_wherever_the_model_puts_it() {
        for answer in [
            "703",
            "703.",
            "The answer is **703**.",
            "417 + 286 = 703",
            "\\boxed{703}",
            "703 (that is 417 + 286)",
        ] {
            assert_eq!(read(answer, 703), Reading::Right, "{answer}");
        }
        assert_eq!(read("1,234", 1234), Reading::Right);
        assert_eq!(read("-12", -12), Reading::Right);
        assert_eq!(
            read("tok-12", 12),
            Reading::Right,
            "a hyphen in a word is no sign"
        );
        assert_eq!(read("704", 703), Reading::Wrong(704));
        assert_eq!(read("seven hundred and three", 703), Reading::NoNumber);
        assert_eq!(read("", 703), Reading::NoNumber);
        assert_eq!(numbers("1,23 and 4,5678"), vec![1, 23, 4, 5678]);
    }
}
