//! A recipe's command text as the words a shell would pass to the engine: both runners hand the
//! rendered command to bash, so quotes, backslash escapes and `\`-newline continuations are
//! read as bash reads them. One command only: a `;`, `&&`, `|`, redirection or command
//! substitution is refused by name (spark-launch runs one engine process; setup belongs in a
//! mod's `run.sh`). Leading `NAME=value` words are environment assignments. A `$VAR` is kept
//! as written and reported, since no shell expands it here.
//!
//! For an engine whose runner hands a recipe's command to bash whole, a script of several
//! commands is read too ([`split_script`]): the text before its last command is kept as written
//! (bash runs it), and the last command, which must be one plain command, is split as above.
//! Pure.

/// The words of one command.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CommandWords {
    /// `NAME=value` words before the program, in order.
    pub assignments: Vec<(String, String)>,
    /// The program and its arguments.
    pub argv: Vec<String>,
    /// Words holding a `$` that bash would have expanded (unquoted or in double quotes).
    pub expansions: Vec<String>,
}

/// Why a command text is not one plain command.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum WordsError {
    #[error("a {quote} quote opened at character {at} never closes")]
    Unclosed { quote: &'static str, at: usize },
    #[error(
        "`{op}` at character {at} makes this more than one plain command (spark-launch runs one engine command)"
    )]
    Operator { op: String, at: usize },
    #[error(
        "a second command starts on line {line} (a line without a trailing `\\` ends the first)"
    )]
    SecondCommand { line: usize },
    #[error("the command is empty")]
    Empty,
    #[error("a `)` at character {at} closes nothing")]
    Unbalanced { at: usize },
    #[error(
        "a here-document (`<<`) at character {at}: its lines cannot be told from commands here"
    )]
    HereDocument { at: usize },
    #[error(
        "the script's last command is joined to the one before it by `{op}` at character {at}; the engine must be the script's last command, on its own"
    )]
    LastJoined { op: String, at: usize },
    #[error(
        "`{op}` at character {at} ends the script's last command, which would not run in the foreground"
    )]
    Trailing { op: String, at: usize },
}

/// A script whose last command is read as words: the commands before it as written, with the
/// operator or line end that separates them from it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ScriptWords {
    /// The text before the last command (`if …; fi &&`), trimmed; `None`: one command.
    pub before: Option<String>,
    pub last: CommandWords,
}

/// What the scanner of [`split_script`] is inside.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Within {
    /// `(…)` or `$(…)`.
    Parens,
    Double,
    Backticks,
}

/// Splits a script of several commands — separated by `;`, `&&`, `||`, `&`, `|` or line ends
/// outside quotes, brackets and substitutions — into the text before its last command and that
/// command's words ([`split`]). Refused: a last command joined to the one before by a pipe
/// (`|`), one sent to the background or followed by an operator, a last command inside a
/// compound (`if …; then llama-server …; fi`: its last words are `fi`, which starts no engine,
/// as the caller finds), a here-document, a quote or bracket that never closes.
pub fn split_script(command: &str) -> Result<ScriptWords, WordsError> {
    let chars: Vec<char> = command.chars().collect();
    // Top-level separators: (start, end, operator).
    let mut seps: Vec<(usize, usize, String)> = Vec::new();
    let mut stack: Vec<(Within, usize)> = Vec::new();
    let mut word_start = true;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        match stack.last().map(|(w, _)| *w) {
            Some(Within::Double) => {
                match c {
                    '\\' => i += 1,
                    '"' => {
                        stack.pop();
                    }
                    '$' if next == Some('(') => {
                        stack.push((Within::Parens, i));
                        i += 1;
                    }
                    '`' => stack.push((Within::Backticks, i)),
                    _ => {}
                }
                i += 1;
                continue;
            }
            Some(Within::Backticks) => {
                match c {
                    '\\' => i += 1,
                    '`' => {
                        stack.pop();
                    }
                    _ => {}
                }
                i += 1;
                continue;
            }
            _ => {}
        }
        let top = stack.is_empty();
        let was_start = word_start;
        word_start = false;
        match c {
            '\\' => i += 1,
            '\'' => {
                let close = single_quoted_len(&chars, i)?;
                i += close + 1;
            }
            '"' => stack.push((Within::Double, i)),
            '`' => stack.push((Within::Backticks, i)),
            '$' if next == Some('(') => {
                stack.push((Within::Parens, i));
                i += 1;
            }
            '(' => stack.push((Within::Parens, i)),
            ')' => match stack.last() {
                Some((Within::Parens, _)) => {
                    stack.pop();
                }
                _ => return Err(WordsError::Unbalanced { at: i }),
            },
            '#' if was_start => {
                while i + 1 < chars.len() && chars[i + 1] != '\n' {
                    i += 1;
                }
            }
            '<' if next == Some('<') && chars.get(i + 2) != Some(&'<') => {
                return Err(WordsError::HereDocument { at: i });
            }
            ' ' | '\t' => word_start = true,
            '\n' | ';' | '|' | '&' => {
                word_start = true;
                // `>&`, `&>` and `<&` are redirections, not separators.
                let redirect =
                    c == '&' && (next == Some('>') || i > 0 && matches!(chars[i - 1], '>' | '<'));
                if top && !redirect {
                    let doubled = c != '\n' && next == Some(c);
                    let end = if doubled { i + 2 } else { i + 1 };
                    seps.push((i, end, chars[i..end].iter().collect()));
                    i = end;
                    continue;
                }
            }
            _ => {}
        }
        i += 1;
    }
    if let Some((within, at)) = stack.last() {
        let quote = match within {
            Within::Parens => "`(`",
            Within::Double => "double",
            Within::Backticks => "backtick",
        };
        return Err(WordsError::Unclosed { quote, at: *at });
    }
    // The last segment with a command in it, and the separators around it.
    let text = |from: usize, to: usize| chars[from..to].iter().collect::<String>();
    // Nothing but spaces, line continuations and comments.
    let blank = |t: &str| {
        t.replace("\\\n", "").lines().all(|l| {
            let l = l.trim();
            l.is_empty() || l.starts_with('#')
        })
    };
    let mut start = 0;
    let mut last = None;
    for (k, (s, e, _)) in seps.iter().enumerate() {
        if !blank(&text(start, *s)) {
            last = Some((start, *s, k));
        }
        start = *e;
    }
    let (from, to, after) = if !blank(&text(start, chars.len())) {
        (start, chars.len(), seps.len())
    } else {
        last.ok_or(WordsError::Empty)?
    };
    if let Some((at, _, op)) = seps[after..]
        .iter()
        .find(|(_, _, op)| op != ";" && op != "\n")
    {
        return Err(WordsError::Trailing {
            op: op.clone(),
            at: *at,
        });
    }
    // The operator that joins the last command to the one before: the separator before it,
    // looking past line ends that follow an operator (`a |` on one line, the engine on the next
    // is still a pipe).
    let mut joined_at = None;
    for k in (0..after).rev() {
        let (at, end, op) = &seps[k];
        if op != "\n" {
            joined_at = Some((*at, *end, op.clone()));
            break;
        }
        joined_at = Some((*at, *end, op.clone()));
        let previous_end = if k == 0 { 0 } else { seps[k - 1].1 };
        if !blank(&text(previous_end, *at)) {
            break;
        }
    }
    if let Some((at, _, op)) = &joined_at
        && op == "|"
    {
        return Err(WordsError::LastJoined {
            op: op.clone(),
            at: *at,
        });
    }
    let before = after
        .checked_sub(1)
        .map(|k| text(0, seps[k].1))
        .filter(|t| !blank(t));
    let shift = |e: WordsError| match e {
        WordsError::Unclosed { quote, at } => WordsError::Unclosed {
            quote,
            at: at + from,
        },
        WordsError::Operator { op, at } => WordsError::Operator { op, at: at + from },
        other => other,
    };
    let last = split(&text(from, to)).map_err(shift)?;
    Ok(ScriptWords {
        before: before.map(|t| t.trim().to_string()),
        last,
    })
}

struct Word {
    text: String,
    expands: bool,
    started: bool,
}

impl Word {
    fn new() -> Word {
        Word {
            text: String::new(),
            expands: false,
            started: false,
        }
    }
}

/// Splits a command into words.
pub fn split(command: &str) -> Result<CommandWords, WordsError> {
    let chars: Vec<char> = command.chars().collect();
    let mut words: Vec<(String, bool)> = Vec::new();
    let mut w = Word::new();
    let mut line = 1usize;
    let mut ended_line: Option<usize> = None;
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if let Some(l) = ended_line
            && !c.is_whitespace()
            && c != '#'
        {
            return Err(WordsError::SecondCommand { line: l });
        }
        match c {
            ' ' | '\t' | '\n' => {
                finish(&mut w, &mut words);
                if c == '\n' {
                    line += 1;
                    if !words.is_empty() {
                        ended_line = Some(line);
                    }
                }
                i += 1;
            }
            '#' if !w.started => {
                while i < chars.len() && chars[i] != '\n' {
                    i += 1;
                }
            }
            '\\' => {
                match chars.get(i + 1) {
                    Some('\n') => line += 1,
                    Some(&n) => {
                        w.text.push(n);
                        w.started = true;
                    }
                    None => {
                        w.text.push('\\');
                        w.started = true;
                    }
                }
                i += 2;
            }
            '\'' => {
                let close = single_quoted_len(&chars, i)?;
                w.text.extend(&chars[i + 1..i + 1 + close]);
                line += chars[i + 1..i + 1 + close]
                    .iter()
                    .filter(|&&x| x == '\n')
                    .count();
                w.started = true;
                i += close + 2;
            }
            '"' => {
                i = double_quoted(&chars, i, &mut w, &mut line)?;
            }
            '$' if chars.get(i + 1) == Some(&'(') => {
                return Err(WordsError::Operator {
                    op: "$(".into(),
                    at: i,
                });
            }
            '|' | '&' | ';' | '<' | '>' | '(' | ')' | '`' => {
                let op: String = chars[i..]
                    .iter()
                    .take_while(|x| "|&;<>()`".contains(**x))
                    .collect();
                return Err(WordsError::Operator { op, at: i });
            }
            '$' => {
                w.expands = true;
                w.text.push('$');
                w.started = true;
                i += 1;
            }
            other => {
                w.text.push(other);
                w.started = true;
                i += 1;
            }
        }
    }
    finish(&mut w, &mut words);
    assemble(words)
}

/// Reads a double-quoted span starting at `open`; returns the index after its closing quote.
fn double_quoted(
    chars: &[char],
    open: usize,
    w: &mut Word,
    line: &mut usize,
) -> Result<usize, WordsError> {
    w.started = true;
    let mut i = open + 1;
    loop {
        match chars.get(i) {
            None => {
                return Err(WordsError::Unclosed {
                    quote: "double",
                    at: open,
                });
            }
            Some('"') => return Ok(i + 1),
            Some('\\') => {
                match chars.get(i + 1) {
                    Some('\n') => *line += 1,
                    Some(&n @ ('$' | '`' | '"' | '\\')) => w.text.push(n),
                    Some(&n) => {
                        w.text.push('\\');
                        w.text.push(n);
                    }
                    None => w.text.push('\\'),
                }
                i += 2;
            }
            Some('$') if chars.get(i + 1) == Some(&'(') => {
                return Err(WordsError::Operator {
                    op: "$(".into(),
                    at: i,
                });
            }
            Some('`') => {
                return Err(WordsError::Operator {
                    op: "`".into(),
                    at: i,
                });
            }
            Some(&c) => {
                if c == '$' {
                    w.expands = true;
                }
                if c == '\n' {
                    *line += 1;
                }
                w.text.push(c);
                i += 1;
            }
        }
    }
}

fn finish(w: &mut Word, words: &mut Vec<(String, bool)>) {
    if w.started {
        words.push((std::mem::take(&mut w.text), w.expands));
    }
    *w = Word::new();
}

fn assemble(words: Vec<(String, bool)>) -> Result<CommandWords, WordsError> {
    let mut out = CommandWords::default();
    let mut in_assignments = true;
    for (text, expands) in words {
        if expands {
            out.expansions.push(text.clone());
        }
        if in_assignments && let Some((name, value)) = assignment(&text) {
            out.assignments.push((name, value));
            continue;
        }
        in_assignments = false;
        out.argv.push(text);
    }
    if out.argv.is_empty() {
        return Err(WordsError::Empty);
    }
    Ok(out)
}

fn assignment(word: &str) -> Option<(String, String)> {
    let (name, value) = word.split_once('=')?;
    let ok = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    ok.then(|| (name.to_string(), value.to_string()))
}

/// How many characters the single-quoted text opened at `chars[at]` holds (a shell takes
/// everything up to the next `'` as written), or where the quote opened when it never closes.
fn single_quoted_len(chars: &[char], at: usize) -> Result<usize, WordsError> {
    chars[at + 1..]
        .iter()
        .position(|&x| x == '\'')
        .ok_or(WordsError::Unclosed {
            quote: "single",
            at,
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(text: &str) -> Vec<String> {
        split(text).unwrap().argv
    }

    #[test]
    fn continuations_quotes_and_json_split_as_bash_splits_them() {
        let cmd = "vllm serve org/m \\\n    --port 8000 \\\n    --compilation-config '{\"mode\": 3}' \\\n    --x \"a b\"\n";
        assert_eq!(
            argv(cmd),
            [
                "vllm",
                "serve",
                "org/m",
                "--port",
                "8000",
                "--compilation-config",
                "{\"mode\": 3}",
                "--x",
                "a b"
            ]
        );
    }

    #[test]
    fn backslashes_escape_outside_quotes_and_mostly_not_inside_double_quotes() {
        assert_eq!(argv(r#"a\ b "c\d" "e\"f""#), ["a b", "c\\d", "e\"f"]);
    }

    #[test]
    fn leading_assignments_are_environment_not_arguments() {
        let w = split("FOO=1 BAR=a=b vllm serve m X=2").unwrap();
        assert_eq!(
            w.assignments,
            [
                ("FOO".to_string(), "1".to_string()),
                ("BAR".into(), "a=b".into())
            ]
        );
        assert_eq!(w.argv, ["vllm", "serve", "m", "X=2"]);
    }

    #[test]
    fn shell_operators_are_refused_by_name() {
        assert_eq!(
            split("pip install x && vllm serve m").unwrap_err(),
            WordsError::Operator {
                op: "&&".into(),
                at: 14
            }
        );
        assert!(matches!(
            split("vllm serve $(cat f)"),
            Err(WordsError::Operator { .. })
        ));
        assert!(matches!(
            split("vllm serve m > log"),
            Err(WordsError::Operator { .. })
        ));
        assert_eq!(
            argv("vllm serve m --x '>|;&'"),
            ["vllm", "serve", "m", "--x", ">|;&"]
        );
    }

    #[test]
    fn a_line_without_continuation_ends_the_command() {
        assert_eq!(
            split("vllm serve m\n--port 1\n").unwrap_err(),
            WordsError::SecondCommand { line: 2 }
        );
        assert_eq!(
            argv("\n# comment\nvllm serve m # trailing\n\n"),
            ["vllm", "serve", "m"]
        );
    }

    #[test]
    fn dollar_words_are_kept_and_reported() {
        let w = split("vllm serve $MODEL --x '$literal' --y \"${HOME}/a\"").unwrap();
        assert_eq!(
            w.argv,
            [
                "vllm",
                "serve",
                "$MODEL",
                "--x",
                "$literal",
                "--y",
                "${HOME}/a"
            ]
        );
        assert_eq!(w.expansions, ["$MODEL", "${HOME}/a"]);
    }

    fn script(text: &str) -> ScriptWords {
        split_script(text).unwrap()
    }

    #[test]
    fn a_script_keeps_what_runs_before_its_last_command_as_written() {
        // The shape of a community llama-cpp recipe that fetches a draft model first.
        let s = script(
            "if [ ! -f /tmp/d.gguf ]; then \\\n  echo \"Downloading (~1.7 GB)...\" && \\\n  curl -sL -o /tmp/d.gguf \"https://h/x;y\" ; \\\nfi && \\\nllama-server \\\n  -hf org/m:Q4_K_M --port 8080 \\\n  --chat-template-kwargs '{\"a\":true}'\n",
        );
        assert_eq!(
            s.before.as_deref(),
            Some(
                "if [ ! -f /tmp/d.gguf ]; then \\\n  echo \"Downloading (~1.7 GB)...\" && \\\n  curl -sL -o /tmp/d.gguf \"https://h/x;y\" ; \\\nfi &&"
            )
        );
        assert_eq!(
            s.last.argv,
            [
                "llama-server",
                "-hf",
                "org/m:Q4_K_M",
                "--port",
                "8080",
                "--chat-template-kwargs",
                "{\"a\":true}"
            ]
        );
        // One command is one command; lines and substitutions before the last are not read.
        assert_eq!(script("llama-server -m a ;\n").before, None);
        assert_eq!(script("# note\nllama-server -m a").before, None);
        let s = script("cd /w\nX=$(a; b) 2>&1 && echo `c;d`\n\nllama-server -m a");
        assert_eq!(
            s.before.as_deref(),
            Some("cd /w\nX=$(a; b) 2>&1 && echo `c;d`")
        );
        assert_eq!(s.last.argv, ["llama-server", "-m", "a"]);
    }

    #[test]
    fn a_script_whose_last_command_is_not_plain_and_alone_is_refused() {
        assert!(matches!(
            split_script("a |\n llama-server -m x"),
            Err(WordsError::LastJoined { op, .. }) if op == "|"
        ));
        assert!(matches!(
            split_script("a && llama-server -m x &"),
            Err(WordsError::Trailing { op, .. }) if op == "&"
        ));
        assert!(matches!(
            split_script("a && llama-server -m x > log"),
            Err(WordsError::Operator { op, at: 23 }) if op == ">"
        ));
        assert!(matches!(
            split_script("cat <<EOF\nx\nEOF\nllama-server"),
            Err(WordsError::HereDocument { at: 4 })
        ));
        assert!(matches!(
            split_script("case $x in a) b ;; esac"),
            Err(WordsError::Unbalanced { .. })
        ));
        // A compound around the engine leaves `fi` last, which starts no engine.
        assert_eq!(
            script("if true; then llama-server -m x; fi").last.argv,
            ["fi"]
        );
    }

    #[test]
    fn unclosed_quotes_and_empty_commands_are_errors() {
        assert_eq!(
            split("vllm serve 'm").unwrap_err(),
            WordsError::Unclosed {
                quote: "single",
                at: 11
            }
        );
        assert_eq!(split("  \n ").unwrap_err(), WordsError::Empty);
    }
}
