//! Foreign text made safe to print: what comes from a snapshot, a node, a log or the network
//! (interface names, file contents, log lines, mDNS names) may hold control characters that
//! would drive the terminal (`ESC [2J`), forge lines, or break a command a user pastes. Before
//! such text reaches a finding, a fix, a table or a report it goes through [`printable`] (one
//! line) or [`printable_lines`] (keeps line breaks and tabs): every other control character is
//! shown escaped (`\u{1b}`), so the user sees what is there and nothing acts on it. Also a cap
//! on the length of one value ([`MAX_VALUE`]). Pure.

use std::borrow::Cow;

use crate::quote::Style;

/// The longest foreign value kept, in characters; the rest is cut with `…`.
pub const MAX_VALUE: usize = 4096;

fn is_unsafe(c: char, keep_lines: bool) -> bool {
    match c {
        '\n' | '\t' => !keep_lines,
        // C0 and C1 controls, DEL, and the bidirectional overrides that reorder what is shown.
        c if c.is_control() => true,
        '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' => true,
        _ => false,
    }
}

fn clean(s: &str, keep_lines: bool, max: usize) -> Cow<'_, str> {
    let long = s.chars().nth(max).is_some();
    if !long && !s.chars().any(|c| is_unsafe(c, keep_lines)) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len().saturating_add(16));
    for (i, c) in s.chars().enumerate() {
        if i == max {
            out.push('…');
            break;
        }
        if is_unsafe(c, keep_lines) {
            out.push_str(&format!("\\u{{{:x}}}", c as u32));
        } else {
            out.push(c);
        }
    }
    Cow::Owned(out)
}

/// One line of foreign text, safe to print: control characters (line breaks included) escaped,
/// at most [`MAX_VALUE`] characters.
pub fn printable(s: &str) -> Cow<'_, str> {
    clean(s, false, MAX_VALUE)
}

/// Foreign text of several lines (a config file, a log excerpt): line breaks and tabs kept,
/// every other control character escaped.
pub fn printable_lines(s: &str) -> Cow<'_, str> {
    clean(s, true, usize::MAX)
}

/// A foreign value as one word of a paste-ready shell command: itself when it holds only
/// characters no shell treats specially, else quoted (and its control characters escaped), so
/// `eth0;reboot` from a hostile snapshot stays an interface name in a fix command.
pub fn shell_word(s: &str) -> Cow<'_, str> {
    match printable(s) {
        // `printable` shows a NUL as `\u{0}`, so what is quoted holds none.
        Cow::Borrowed(p) => crate::quote::quote(p, Style::Plain).unwrap_or(Cow::Borrowed(p)),
        Cow::Owned(p) => Cow::Owned(
            crate::quote::quote(&p, Style::Plain)
                .map(Cow::into_owned)
                .unwrap_or(p),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clean_text_is_borrowed_unchanged() {
        assert!(matches!(printable("enp1s0f1np1"), Cow::Borrowed(_)));
        assert!(matches!(printable_lines("a\n\tb"), Cow::Borrowed(_)));
    }

    #[test]
    fn control_characters_are_shown_escaped_never_passed_through() {
        assert_eq!(printable("eth\u{1b}[2J0"), "eth\\u{1b}[2J0");
        assert_eq!(printable("a\nb\rc\0"), "a\\u{a}b\\u{d}c\\u{0}");
        assert_eq!(printable_lines("a\nb\u{7}"), "a\nb\\u{7}");
        assert_eq!(printable("x\u{202e}y"), "x\\u{202e}y");
    }

    #[test]
    fn a_shell_word_is_quoted_only_when_it_must_be() {
        assert_eq!(shell_word("enp1s0f1np1"), "enp1s0f1np1");
        assert_eq!(shell_word("192.168.1.1/24"), "192.168.1.1/24");
        assert_eq!(shell_word("eth0;reboot"), "'eth0;reboot'");
        assert_eq!(shell_word("a'b"), "'a'\\''b'");
        assert_eq!(shell_word("x\u{1b}"), "'x\\u{1b}'");
    }

    #[test]
    fn a_huge_value_is_cut() {
        let s = "x".repeat(MAX_VALUE + 10);
        let p = printable(&s);
        assert_eq!(p.chars().count(), MAX_VALUE + 1);
        assert!(p.ends_with('…'));
    }
}
