//! Where a node's password comes from when one is needed (SSH first contact, sudo): one line
//! of stdin (`--password-stdin`), or the terminal, asked per node or once for all. Nothing is
//! read before the caller asks; a password is never echoed, logged or put on a command line.
//! Which node needs one, and when, is the caller's business (`trust::connect`, `fabric`).

use std::io::{IsTerminal, Read};

use super::askpass::Password;

/// How the user gives passwords, as the flags say (nothing is read yet).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PasswordInput {
    /// `--password-stdin`: one line of stdin for every node that asks.
    pub stdin: bool,
    /// `--same-password`: asked once on the terminal for every node that asks.
    pub same_for_all: bool,
}

/// `--password-stdin` gave no password.
#[derive(Debug, thiserror::Error)]
pub enum PromptError {
    #[error("--password-stdin: cannot read stdin: {0}")]
    Stdin(std::io::Error),
    #[error("--password-stdin: stdin is empty")]
    EmptyStdin,
}

impl PromptError {
    /// 2 when stdin held no password (the user's input), 1 when it could not be read.
    pub fn exit_code(&self) -> u8 {
        match self {
            PromptError::Stdin(_) => 1,
            PromptError::EmptyStdin => 2,
        }
    }
}

impl PasswordInput {
    /// With `--password-stdin`: its first line, read now; `None` without the flag.
    pub fn read_stdin(&self) -> Result<Option<Password>, PromptError> {
        if !self.stdin {
            return Ok(None);
        }
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(PromptError::Stdin)?;
        let line = text.lines().next().unwrap_or("").trim_end_matches('\r');
        if line.is_empty() {
            return Err(PromptError::EmptyStdin);
        }
        Ok(Some(Password::new(line)))
    }
}

/// Whether a password can be asked on a terminal: stderr is one and `/dev/tty` opens.
pub fn terminal() -> bool {
    std::io::stderr().is_terminal() && std::fs::File::open("/dev/tty").is_ok()
}

/// Asks on the terminal with `prompt`, without echo.
pub fn ask(prompt: &str) -> std::io::Result<Password> {
    rpassword::prompt_password(prompt).map(Password::new)
}
