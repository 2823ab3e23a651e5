//! A recipe's command text as the words a shell would pass to the engine: both runners hand the
//! rendered command to bash, so quotes, backslash escapes and `\`-newline continuations are
//! read as bash reads them. One command only: a `;`, `&&`, `|`, redirection or command
//! substitution is refused by name (spark-launch runs one engine process; setup belongs in a
//! mod's `run.sh`). Leading `NAME=value` words are environment assignments. A `$VAR` is kept
//! as written and reported, since no shell expands it here. Pure.

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
                let close =
                    chars[i + 1..]
                        .iter()
                        .position(|&x| x == '\'')
                        .ok_or(WordsError::Unclosed {
                            quote: "single",
                            at: i,
                        })?;
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
