//! How a command's result is shown, one shape for every command: the text a person reads, the
//! JSON `--json` prints, and how the command ends (exit 0, a failed verdict, or an error said
//! after the result). The library's report types implement [`Shown`]; the CLI only prints.
//! Pure: no I/O here.

/// How a command ends once its result is shown.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ending {
    /// Exit 0.
    Ok,
    /// Exit 1: a failed verdict or check, already shown in the result.
    Failed,
    /// `error: MESSAGE` after the result, with this exit code (1 failed, 2 refused input,
    /// 130 interrupted).
    Error { code: u8, message: String },
}

/// A command's result as it is shown.
pub trait Shown {
    /// The text for stdout (the CLI escapes control characters and ends it with a newline).
    fn text(&self) -> String;

    /// The pretty JSON for stdout with `--json`.
    fn json(&self) -> serde_json::Result<String>;

    /// How the command ends (exit 0 unless the result says otherwise).
    fn ending(&self) -> Ending {
        Ending::Ok
    }
}
