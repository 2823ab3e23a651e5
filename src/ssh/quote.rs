//! Quoting argv for the remote shell. OpenSSH joins its command arguments with spaces and hands
//! the string to the user's login shell, so every word must be quoted for a POSIX shell first;
//! otherwise a path with a space or a `$` would be split or expanded on the node.

/// A word that no POSIX shell can receive (it contains a NUL byte).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("the command cannot be passed to a remote shell: an argument contains a NUL byte")]
pub struct QuoteError;

/// Quotes one word for a POSIX shell (`it's` → `"it's"`, `a b` → `'a b'`, `plain` unchanged).
pub fn quote(word: &str) -> Result<String, QuoteError> {
    shlex::try_quote(word)
        .map(|q| q.into_owned())
        .map_err(|_| QuoteError)
}

/// Quotes every word and joins them with spaces: the string to give `ssh` as its command.
pub fn join<S: AsRef<str>>(argv: &[S]) -> Result<String, QuoteError> {
    shlex::try_join(argv.iter().map(|s| s.as_ref())).map_err(|_| QuoteError)
}

/// Quotes for display in messages; never fails (a NUL shows as `\0`).
pub fn display<S: AsRef<str>>(argv: &[S]) -> String {
    let words: Vec<String> = argv
        .iter()
        .map(|s| s.as_ref().replace('\0', "\\0"))
        .collect();
    join(&words).unwrap_or_else(|_| words.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    #[test]
    fn plain_words_stay_as_they_are() {
        assert_eq!(join(&["docker", "ps", "-a"]).unwrap(), "docker ps -a");
    }

    #[test]
    fn spaces_quotes_dollars_and_globs_survive_a_real_shell_unchanged() {
        let argv = [
            "printf",
            "%s\\n",
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
        ];
        let line = join(&argv).unwrap();
        let out = Command::new("sh").arg("-c").arg(&line).output().unwrap();
        let got = String::from_utf8(out.stdout).unwrap();
        let want: String = argv[2..].iter().map(|a| format!("{a}\n")).collect();
        assert_eq!(got, want, "line was: {line}");
    }

    #[test]
    fn a_nul_byte_is_refused_rather_than_truncated() {
        assert_eq!(join(&["echo", "a\0b"]), Err(QuoteError));
        let shown = display(&["echo", "a\0b"]);
        assert!(shown.starts_with("echo ") && shown.contains("a\\") && !shown.contains('\0'));
    }
}
