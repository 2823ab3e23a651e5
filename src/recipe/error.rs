//! What is wrong with a recipe, located: `file:line: field: problem; fix`, every problem of a
//! file at once (exit 2), and the warnings a recipe that still runs carries (a key no flag
//! table knows, a field spark-launch does not apply). Text only; deciding is the parsers'.

use std::fmt;

use serde::Serialize;

use crate::problem::Problem;

/// One thing wrong with a recipe.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RecipeError {
    /// The recipe's path as the user gave it (or a registry-relative label).
    pub file: String,
    /// 1-based; `None` where no line applies (a `--set`, a missing file).
    pub line: Option<usize>,
    pub column: Option<usize>,
    /// `defaults.port`, `command`, `mods[1]`, `--set tp=2`, or empty.
    pub field: String,
    /// What is wrong and, when there is one thing to do, the fix.
    #[serde(flatten)]
    pub problem: Problem<Option<String>>,
}

impl RecipeError {
    /// An error about `field` of `file` (line filled in by the caller that knows the text).
    pub fn new(file: &str, field: impl Into<String>, problem: impl Into<String>) -> RecipeError {
        RecipeError {
            file: file.to_string(),
            line: None,
            column: None,
            field: field.into(),
            problem: Problem::with_fix(problem, None),
        }
    }

    /// The same error with a fix.
    pub fn fix(mut self, fix: impl Into<String>) -> RecipeError {
        self.problem.fix = Some(fix.into());
        self
    }

    /// The same error at a line.
    pub fn at(mut self, line: Option<usize>) -> RecipeError {
        self.line = line;
        self
    }
}

impl fmt::Display for RecipeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(l), Some(c)) => write!(f, "{}:{l}:{c}: ", self.file)?,
            (Some(l), None) => write!(f, "{}:{l}: ", self.file)?,
            _ => write!(f, "{}: ", self.file)?,
        }
        if !self.field.is_empty() {
            write!(f, "{}: ", self.field)?;
        }
        f.write_str(&self.problem.what)?;
        if let Some(fix) = &self.problem.fix {
            write!(f, "; {fix}")?;
        }
        Ok(())
    }
}

/// Every problem found in one recipe. A recipe with any of them is refused (exit 2).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, thiserror::Error)]
pub struct RecipeErrors(pub Vec<RecipeError>);

impl RecipeErrors {
    /// One error.
    pub fn one(e: RecipeError) -> RecipeErrors {
        RecipeErrors(vec![e])
    }
}

impl From<RecipeError> for RecipeErrors {
    fn from(e: RecipeError) -> RecipeErrors {
        RecipeErrors::one(e)
    }
}

impl fmt::Display for RecipeErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let n = self.0.len();
        write!(
            f,
            "recipe refused ({n} problem{})",
            if n == 1 { "" } else { "s" }
        )?;
        for e in &self.0 {
            write!(f, "\n  {e}")?;
        }
        Ok(())
    }
}

/// Something a recipe asks for that spark-launch passes on differently or not at all, said
/// out loud: the recipe still runs.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct RecipeWarning {
    /// `defaults.ep_size`, `post_exec`, `env.HF_TOKEN`, …
    pub field: String,
    pub message: String,
}

impl RecipeWarning {
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> RecipeWarning {
        RecipeWarning {
            field: field.into(),
            message: message.into(),
        }
    }
}

impl fmt::Display for RecipeWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.field, self.message)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_reads_file_line_field_problem_and_fix() {
        let e = RecipeError::new("r.yaml", "defaults.port", "is not a number")
            .at(Some(7))
            .fix("write port: 8000");
        assert_eq!(
            e.to_string(),
            "r.yaml:7: defaults.port: is not a number; write port: 8000"
        );
    }

    #[test]
    fn every_problem_of_a_recipe_is_listed_under_one_heading() {
        let all = RecipeErrors(vec![
            RecipeError::new("r.yaml", "a", "x"),
            RecipeError::new("r.yaml", "", "y"),
        ]);
        assert_eq!(
            all.to_string(),
            "recipe refused (2 problems)\n  r.yaml: a: x\n  r.yaml: y"
        );
    }
}
