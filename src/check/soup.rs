//! Token soup: text a broken model produces while the API looks healthy — one phrase over and
//! over, a loop of a few characters, or no words at all. Judged on the text alone. Pure.

/// Why `text` is soup, or `None` when it reads as words. Empty text is judged by the caller
/// (no text is not soup, it is no answer).
pub fn soup(text: &str) -> Option<String> {
    let text = text.trim();
    if text.is_empty() {
        return None;
    }
    if let Some(why) = looping_tail(text) {
        return Some(why);
    }
    let visible: Vec<char> = text.chars().filter(|c| !c.is_whitespace()).collect();
    let letters = visible.iter().filter(|c| c.is_alphabetic()).count();
    if visible.len() >= 8 && letters * 2 < visible.len() {
        return Some(format!(
            "no words: {} of {} characters are letters",
            letters,
            visible.len()
        ));
    }
    let words: Vec<String> = text
        .split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric())
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect();
    if words.len() >= 8 {
        let mut counts = std::collections::BTreeMap::<&str, usize>::new();
        for w in &words {
            *counts.entry(w).or_default() += 1;
        }
        if let Some((w, n)) = counts.iter().max_by_key(|(_, n)| **n)
            && n * 5 >= words.len() * 2
        {
            return Some(format!("{w:?} is {n} of its {} words", words.len()));
        }
    }
    if words.len() >= 12 {
        let grams: Vec<&[String]> = words.windows(3).collect();
        let distinct: std::collections::BTreeSet<&[String]> = grams.iter().copied().collect();
        if distinct.len() * 2 < grams.len() {
            let mut counts = std::collections::BTreeMap::<&[String], usize>::new();
            for g in &grams {
                *counts.entry(g).or_default() += 1;
            }
            let (g, n) = counts
                .into_iter()
                .max_by_key(|(_, n)| *n)
                .unwrap_or((grams[0], 1));
            return Some(format!(
                "the same words repeat: {:?} {n} times ({} distinct of {} three-word runs)",
                g.join(" "),
                distinct.len(),
                grams.len()
            ));
        }
    }
    None
}

/// The text ends in a loop: its last characters are one short piece (1 to 60 characters)
/// repeated at least four times and 24 characters long in all.
fn looping_tail(text: &str) -> Option<String> {
    let chars: Vec<char> = text.chars().collect();
    for period in 1..=60usize {
        let times = (24usize.div_ceil(period)).max(4);
        let span = period * times;
        if span > chars.len() {
            break;
        }
        let tail = &chars[chars.len() - span..];
        let piece = &tail[..period];
        if piece.iter().all(|c| c.is_whitespace()) {
            continue;
        }
        if tail.chunks(period).all(|c| c == piece) {
            let piece: String = piece.iter().collect();
            return Some(format!(
                "ends in a loop: {:?} at least {times} times over",
                piece.trim()
            ));
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prose_is_not_soup() {
        for text in [
            "The sky looks blue because air molecules scatter short blue wavelengths of sunlight \
             much more than long red ones, so blue light reaches our eyes from every direction.",
            "703",
            "The code word is amber-5821.",
            "Rayleigh scattering: the shorter the wavelength, the stronger it is scattered, and \
             the sky is lit by that scattered light. At sunset the path is longer, so the sky \
             turns red and orange.",
            "天空之所以是蓝色的，是因为大气中的分子对短波长的蓝光散射得更强。",
        ] {
            assert_eq!(soup(text), None, "{text}");
        }
    }

    #[test]
    fn a_repeated_phrase_a_short_loop_or_no_words_is_soup() {
        let phrase = "the sky is blue because ".repeat(10);
        let why = soup(&phrase).unwrap();
        assert!(why.contains("loop") || why.contains("repeat"), "{why}");
        let why = soup("and and and and and the and and and and").unwrap();
        assert!(why.contains("\"and\" is 9 of its 10 words"), "{why}");
        let why = soup(&"!".repeat(40)).unwrap();
        assert!(why.contains("loop: \"!\""), "{why}");
        let why = soup("1 2 3 ; 9 ( ) 77 ## 4 %% 1").unwrap();
        assert!(why.starts_with("no words"), "{why}");
        // Phrases that repeat with variation, as a looping model writes them.
        let looping = (0..8)
            .map(|i| format!("I think the answer is {i}. Let me check again."))
            .collect::<Vec<_>>()
            .join(" ");
        let why = soup(&looping).unwrap();
        assert!(why.contains("the same words repeat"), "{why}");
        assert_eq!(soup(""), None);
    }
}
