//! EnsureFolders: a folder on each node, created with its parents when missing, as the user
//! spark-launch connects as (the runtime cache a job's containers mount); what is in it is
//! never touched. [`ensure_folder`] is the one script that does it, for the Hugging Face cache
//! too.

use futures::future::BoxFuture;

use crate::apply::context::{ApplyContext, shell_error};
use crate::apply::phase::{Phase, PhaseError};
use crate::plan::{EnsureFolders, StepPayload};
use crate::runtime::RuntimeError;
use crate::runtime::shell::NodeShell;

impl<'a> Phase<ApplyContext<'a>> for EnsureFolders {
    fn title(&self) -> String {
        StepPayload::title(self)
    }
    fn run<'b>(
        &'b self,
        ctx: &'b ApplyContext<'a>,
    ) -> BoxFuture<'b, Result<Option<String>, PhaseError>> {
        Box::pin(async move {
            let what = self.what.as_str();
            ctx.on_every_node(self.folders.keys().cloned(), |node, handle| async move {
                let dir = self
                    .folders
                    .get(&node)
                    .ok_or_else(|| RuntimeError::Other("no folder in the plan".into()))?;
                let shell = handle.target.shell()?;
                ensure_folder(shell.as_ref(), dir).await.map_err(|why| {
                    RuntimeError::Other(format!("cannot create the {what} folder {dir}: {why}"))
                })
            })
            .await?;
            Ok(None)
        })
    }
}

/// Creates the folder `dir` (`~/` resolved on the node) with its parents when missing, as the
/// node's user, and leaves one that is there as it is; returns the resolved path, or why it
/// could not (the shell's error, or the tail of what `mkdir` said).
pub async fn ensure_folder(shell: &dyn NodeShell, dir: &str) -> Result<String, String> {
    let script = match dir.strip_prefix("~/") {
        Some(rest) => format!(
            "d=\"$HOME\"/{} && mkdir -p -- \"$d\" && printf '%s' \"$d\"",
            crate::model::script::quote(rest)
        ),
        None => {
            let d = crate::model::script::quote(dir);
            format!("mkdir -p -- {d} && printf '%s' {d}")
        }
    };
    let out = shell
        .run(&script, Vec::new(), None)
        .await
        .map_err(|e| shell_error(e).to_string())?;
    if !out.success() {
        return Err(out.stderr_tail().trim().to_string());
    }
    Ok(out.stdout.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::node::NodeName;
    use crate::runtime::shell::LocalShell;

    #[tokio::test]
    async fn a_missing_folder_is_made_with_its_parents_and_one_that_is_there_is_left_as_it_is() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp
            .path()
            .join("home/u/.cache/spark-launch/runtime/vllm/a--b/img-0123abcd");
        let shell = LocalShell::new(NodeName::new("local").unwrap());
        let d = dir.to_str().unwrap();
        assert_eq!(ensure_folder(&shell, d).await.unwrap(), d);
        assert!(dir.is_dir());
        std::fs::write(dir.join("compiled"), b"x").unwrap();
        ensure_folder(&shell, d).await.unwrap();
        assert!(dir.join("compiled").exists());
        let blocked = tmp.path().join("file");
        std::fs::write(&blocked, b"x").unwrap();
        let why = ensure_folder(&shell, &format!("{}/cache", blocked.display()))
            .await
            .unwrap_err();
        assert!(
            why.contains("Not a directory") || why.contains("File exists"),
            "{why}"
        );
    }
}
