//! The needle (`--context N`): a sentence with a code word, then filler text of about N words,
//! then the question for the code word. The code word sits N words deep: a model (or a server
//! whose context is cut short) that cannot reach that far back does not find it. Pure.

use super::arithmetic::splitmix;

/// Short common words: the filler reads as words (no soup), about a token each.
const FILLER: [&str; 32] = [
    "the", "river", "runs", "past", "an", "old", "mill", "and", "a", "quiet", "field", "where",
    "people", "walk", "in", "the", "morning", "light", "while", "birds", "sing", "above", "green",
    "trees", "near", "small", "houses", "of", "stone", "by", "water", "roads",
];

const CODES: [&str; 12] = [
    "amber", "cobalt", "saffron", "juniper", "walnut", "heron", "quartz", "tundra", "maple",
    "orchid", "falcon", "copper",
];

/// The code word and the prompt that hides it `words` deep.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Needle {
    pub code: String,
    pub prompt: String,
    pub words: u32,
}

/// The needle for `seed`, at a depth of `words` words of filler.
pub fn needle(seed: u64, words: u32) -> Needle {
    let mut s = seed ^ 0x005E_ED0F_C0DE;
    let code = format!(
        "{}-{}",
        CODES[(splitmix(&mut s) % CODES.len() as u64) as usize],
        1000 + splitmix(&mut s) % 9000
    );
    let mut prompt = format!("Remember this: the code word is {code}.\n\n");
    for i in 0..words {
        if i > 0 {
            prompt.push(if i % 12 == 0 { '.' } else { ' ' });
            if i % 12 == 0 {
                prompt.push(' ');
            }
        }
        prompt.push_str(FILLER[(splitmix(&mut s) % FILLER.len() as u64) as usize]);
    }
    prompt.push_str(".\n\nWhat is the code word? Answer with the code word only.");
    Needle {
        code,
        prompt,
        words,
    }
}

/// The answer names the code word (case and surrounding words aside).
pub fn found(answer: &str, code: &str) -> bool {
    answer.to_lowercase().contains(&code.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_code_word_sits_as_deep_as_asked_and_is_found_in_the_answer() {
        let n = needle(3, 500);
        assert_eq!(n, needle(3, 500));
        let filler = n.prompt.split("\n\n").nth(1).unwrap();
        assert_eq!(filler.split_whitespace().count(), 500);
        assert!(
            n.prompt
                .starts_with(&format!("Remember this: the code word is {}.", n.code))
        );
        assert!(n.prompt.ends_with("Answer with the code word only."));
        assert!(found(
            &format!("The code word is {}.", n.code.to_uppercase()),
            &n.code
        ));
        assert!(!found("amber", &n.code));
    }
}
