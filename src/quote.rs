//! Quoting for a POSIX shell: the crate's one quoting function, [`quote`], and the command
//! line made of quoted words, [`join`]. Every command line, script and paste-ready fix the
//! crate writes quotes its words here, so a path with a space, a `$` or a `'` stays one word on
//! the node. A word holding a NUL byte is refused with [`NulByte`]: no argument, script or
//! environment value can carry one, and dropping or cutting it would run another command than
//! the one planned. [`display`] is for messages only (a NUL shows as `\0`).
//!
//! Three [`Style`]s, each kept byte for byte from the places that wrote it before there was one
//! function (plans, `env --format sh` and scripts are compared in snapshots). Pure.

use std::borrow::Cow;

/// How much quoting a word gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    /// As few quotes as a shell needs (the `shlex` crate's rules: `plain` stays, `a b` →
    /// `'a b'`, `it's` → `"it's"`, `K=V` → `'K=V'`): command lines, argv for SSH and mpirun,
    /// what plans show.
    Minimal,
    /// Bare when the word is only ASCII letters, digits and `_ = , . : / @ % + -`, else in
    /// single quotes (`'it'\''s'`): lines a person reads and pastes (`export K=V`, `-e K=V`,
    /// fix commands).
    Plain,
    /// Always in single quotes (`'enp1s0f1np1'`): values assigned in the scripts spark-launch
    /// writes for nodes.
    Always,
}

/// A word that no shell can receive: it holds a NUL byte.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error(
    "`{shown}` holds a NUL byte, which no command line, script or environment value can carry: remove it from the value (a `\\0` or `\\u0000` escape in a YAML or JSON file writes one)"
)]
pub struct NulByte {
    /// The word, printable (control characters escaped, the NUL as `\0`), cut when long.
    pub shown: String,
}

impl NulByte {
    fn of(word: &str) -> NulByte {
        const MAX: usize = 256;
        let mut shown = String::new();
        for c in word.chars().take(MAX) {
            match c {
                '\0' => shown.push_str("\\0"),
                c if c.is_control() => shown.push_str(&format!("\\u{{{:x}}}", c as u32)),
                c => shown.push(c),
            }
        }
        if word.chars().nth(MAX).is_some() {
            shown.push('…');
        }
        NulByte { shown }
    }
}

/// Quotes one word for a POSIX shell in the given style; refuses a word with a NUL byte.
pub fn quote(word: &str, style: Style) -> Result<Cow<'_, str>, NulByte> {
    if word.contains('\0') {
        return Err(NulByte::of(word));
    }
    let single = || Cow::Owned(format!("'{}'", word.replace('\'', r"'\''")));
    match style {
        Style::Minimal => shlex::try_quote(word).map_err(|_| NulByte::of(word)),
        Style::Plain => {
            let bare = !word.is_empty()
                && word.chars().all(|c| {
                    c.is_ascii_alphanumeric()
                        || matches!(c, '_' | '=' | ',' | '.' | ':' | '/' | '@' | '%' | '+' | '-')
                });
            Ok(if bare { Cow::Borrowed(word) } else { single() })
        }
        Style::Always => Ok(single()),
    }
}

/// Quotes every word ([`Style::Minimal`]) and joins them with spaces: one command line.
pub fn join<S: AsRef<str>>(words: &[S]) -> Result<String, NulByte> {
    let quoted: Vec<Cow<'_, str>> = words
        .iter()
        .map(|w| quote(w.as_ref(), Style::Minimal))
        .collect::<Result<_, _>>()?;
    Ok(quoted.join(" "))
}

/// A command line for messages, titles and plans; never fails (a NUL shows as `\0`).
pub fn display<S: AsRef<str>>(words: &[S]) -> String {
    let words: Vec<String> = words
        .iter()
        .map(|w| w.as_ref().replace('\0', "\\0"))
        .collect();
    join(&words).unwrap_or_else(|_| words.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    const HOSTILE: [&str; 14] = [
        "a b",
        "it's",
        "$HOME",
        "`id`",
        "*",
        "semi;colon",
        "new\nline",
        "",
        "\"dq\"",
        "back\\slash",
        "K=a,b%c",
        "^caret",
        "ü-utf8",
        "[cx5]",
    ];

    #[test]
    fn every_style_survives_a_real_shell_unchanged() {
        for style in [Style::Minimal, Style::Plain, Style::Always] {
            let mut line = String::from("printf '%s\\n'");
            for w in HOSTILE {
                line.push(' ');
                line.push_str(&quote(w, style).unwrap());
            }
            let out = Command::new("sh").arg("-c").arg(&line).output().unwrap();
            let got = String::from_utf8(out.stdout).unwrap();
            let want: String = HOSTILE.iter().map(|a| format!("{a}\n")).collect();
            assert_eq!(got, want, "{style:?}: {line}");
        }
    }

    #[test]
    fn a_nul_byte_is_refused_in_every_style_naming_the_word() {
        for style in [Style::Minimal, Style::Plain, Style::Always] {
            let e = quote("eth0\0;reboot", style).unwrap_err();
            assert_eq!(e.shown, "eth0\\0;reboot");
            assert!(e.to_string().contains("NUL byte"), "{e}");
        }
        assert!(join(&["echo", "a\0b"]).is_err());
        let shown = display(&["echo", "a\0b"]);
        assert!(shown.starts_with("echo ") && shown.contains("a\\") && !shown.contains('\0'));
    }

    #[test]
    fn each_style_writes_what_its_callers_always_wrote() {
        // Minimal: shlex's choice, as plans and mpirun lines show it.
        assert_eq!(quote("plain", Style::Minimal).unwrap(), "plain");
        assert_eq!(quote("it's", Style::Minimal).unwrap(), "\"it's\"");
        assert_eq!(
            quote("NCCL_IB_HCA=a,b", Style::Minimal).unwrap(),
            "'NCCL_IB_HCA=a,b'"
        );
        assert_eq!(join(&["docker", "ps", "-a"]).unwrap(), "docker ps -a");
        assert_eq!(join(&["echo", "it's a b"]).unwrap(), r#"echo "it's a b""#);
        // Plain: `export` lines and fixes stay readable.
        assert_eq!(
            quote("rocep1s0f1,roceP2p1s0f1", Style::Plain).unwrap(),
            "rocep1s0f1,roceP2p1s0f1"
        );
        assert_eq!(quote("a'b", Style::Plain).unwrap(), r"'a'\''b'");
        assert_eq!(quote("", Style::Plain).unwrap(), "''");
        // Always: script assignments.
        assert_eq!(
            quote("enp1s0f1np1", Style::Always).unwrap(),
            "'enp1s0f1np1'"
        );
        assert_eq!(quote("it's", Style::Always).unwrap(), r"'it'\''s'");
    }
}
