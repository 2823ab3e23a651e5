//! The pre-plan step that makes a job's own SSH identity (`workload::job_ssh`): two ed25519
//! key pairs (the client's, the host's), made once per launch with the system's
//! `ssh-keygen -t ed25519 -N ''` in a fresh 0700 temporary folder, read into memory, and the
//! folder deleted before planning goes on: nothing of them stays on this machine's disk. The
//! private halves then exist only in this process and, once the job starts, in its
//! containers (removed with the job).
//!
//! Effects: one temporary folder and two `ssh-keygen` runs on this machine. Nothing is logged.

use std::path::Path;

use crate::plan::secret::Secret;
use crate::workload::job_ssh::{JobSshKeys, SshKeyPair};

/// Why the job's keys could not be made.
#[derive(Debug, thiserror::Error)]
pub enum JobSshError {
    #[error("cannot make a temporary folder for the job's SSH keys: {0}")]
    TempDir(std::io::Error),
    #[error(
        "cannot run ssh-keygen for the job's SSH keys: {0} (fix: install the OpenSSH client, e.g. apt-get install openssh-client)"
    )]
    Spawn(std::io::Error),
    #[error("ssh-keygen failed making the job's {what} key: {stderr}")]
    Failed { what: &'static str, stderr: String },
    #[error("cannot read the job's {what} key that ssh-keygen made: {cause}")]
    Read { what: &'static str, cause: String },
}

/// Makes the job's client and host key pairs (see the module docs). `job` names the keys'
/// comments.
pub async fn generate(job: &str) -> Result<JobSshKeys, JobSshError> {
    generate_in(&std::env::temp_dir(), job).await
}

/// [`generate`] with its temporary folder under `base`.
async fn generate_in(base: &Path, job: &str) -> Result<JobSshKeys, JobSshError> {
    let dir = tempfile::Builder::new()
        .prefix("spark-launch-job-ssh-")
        .tempdir_in(base)
        .map_err(JobSshError::TempDir)?;
    set_private(dir.path()).map_err(JobSshError::TempDir)?;
    let client = pair(dir.path(), "client", job).await;
    let host = pair(dir.path(), "host", job).await;
    // Deleted here, whatever happened above: the private halves live on in memory only.
    let closed = dir.close();
    let keys = JobSshKeys {
        client: client?,
        host: host?,
    };
    closed.map_err(JobSshError::TempDir)?;
    Ok(keys)
}

fn set_private(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
}

async fn pair(dir: &Path, what: &'static str, job: &str) -> Result<SshKeyPair, JobSshError> {
    let file = dir.join(what);
    let out = tokio::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", ""])
        .arg("-C")
        .arg(format!("spark-launch-job-{job}-{what}"))
        .arg("-f")
        .arg(&file)
        .stdin(std::process::Stdio::null())
        .output()
        .await
        .map_err(JobSshError::Spawn)?;
    if !out.status.success() {
        return Err(JobSshError::Failed {
            what,
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    let read = |p: &Path| {
        std::fs::read_to_string(p).map_err(|e| JobSshError::Read {
            what,
            cause: e.to_string(),
        })
    };
    let private = read(&file)?;
    let public = read(&file.with_extension("pub"))?;
    let public = public.trim().to_string();
    if !public.starts_with("ssh-ed25519 ") {
        return Err(JobSshError::Read {
            what,
            cause: "its public half is not an ed25519 key".into(),
        });
    }
    let private = Secret::new(private).ok_or(JobSshError::Read {
        what,
        cause: "its private half is empty".into(),
    })?;
    Ok(SshKeyPair { public, private })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn two_fresh_ed25519_pairs_are_made_and_nothing_is_left_on_disk() {
        let base = tempfile::tempdir().unwrap();
        let a = generate_in(base.path(), "t").await.unwrap();
        let b = generate_in(base.path(), "t").await.unwrap();
        assert!(a.client.public.starts_with("ssh-ed25519 "));
        assert!(a.host.public.ends_with("spark-launch-job-t-host"));
        assert!(
            a.client
                .private
                .expose()
                .contains("BEGIN OPENSSH PRIVATE KEY")
        );
        assert_ne!(a.client.public, a.host.public);
        assert_ne!(
            a.client.public, b.client.public,
            "a new identity per launch"
        );
        let left: Vec<_> = std::fs::read_dir(base.path()).unwrap().collect();
        assert!(left.is_empty(), "left behind: {left:?}");
    }
}
