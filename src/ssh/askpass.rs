//! Handing a password to OpenSSH without a terminal: `SSH_ASKPASS` pointing at this very binary,
//! which, when started by ssh with the prompt as its only argument and
//! `SPARK_LAUNCH_ASKPASS_FILE` set, prints the password from that file (mode 0600, in the
//! private runtime folder, deleted as soon as the connection is made) and exits.
//!
//! Using our own executable rather than a script keeps it working where the runtime folder is
//! mounted `noexec`. Only prompts that ask for a password are answered: a passphrase or host-key
//! question gets no answer, so ssh fails instead of receiving the wrong secret.

use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicUsize, Ordering};

use super::runtime_dir::RuntimeDir;

/// The variable that turns the binary into an askpass helper.
pub const ASKPASS_ENV: &str = "SPARK_LAUNCH_ASKPASS_FILE";

static COUNTER: AtomicUsize = AtomicUsize::new(0);

/// A password typed by the user; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Password(String);

impl Password {
    pub fn new(p: impl Into<String>) -> Self {
        Password(p.into())
    }

    pub(crate) fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(<hidden>)")
    }
}

/// A password file plus the helper that reads it; the file is removed on drop.
#[derive(Debug)]
pub struct Askpass {
    file: PathBuf,
    exe: PathBuf,
}

impl Askpass {
    /// Writes the password into a new 0600 file in the runtime folder.
    pub fn create(dir: &RuntimeDir, password: &Password) -> std::io::Result<Askpass> {
        let exe = std::env::current_exe()?;
        let file = dir.join(&format!("pw{}", COUNTER.fetch_add(1, Ordering::SeqCst)));
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode_0600()
            .open(&file)?;
        f.write_all(password.expose().as_bytes())?;
        Ok(Askpass { file, exe })
    }

    /// Sets the environment that makes ssh ask us (and never the terminal).
    pub(crate) fn apply(&self, cmd: &mut tokio::process::Command) {
        cmd.env("SSH_ASKPASS", &self.exe)
            .env("SSH_ASKPASS_REQUIRE", "force")
            .env(ASKPASS_ENV, &self.file);
    }
}

impl Drop for Askpass {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.file);
    }
}

trait Mode0600 {
    fn mode_0600(&mut self) -> &mut Self;
}

impl Mode0600 for std::fs::OpenOptions {
    fn mode_0600(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.mode(0o600)
    }
}

/// When this process was started by ssh as its askpass helper, answer and return the exit code;
/// otherwise `None` (a normal run). Call it first thing in `main`.
pub fn serve_if_asked() -> Option<ExitCode> {
    let file = std::env::var_os(ASKPASS_ENV)?;
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 2 {
        return None;
    }
    let prompt = args[1].to_ascii_lowercase();
    if !prompt.contains("password") {
        return Some(ExitCode::from(1));
    }
    match std::fs::read(&file) {
        Ok(pw) => {
            let mut out = std::io::stdout().lock();
            let _ = out.write_all(&pw);
            let _ = out.write_all(b"\n");
            Some(ExitCode::SUCCESS)
        }
        Err(_) => Some(ExitCode::from(1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_password_file_is_private_and_gone_after_use() {
        let dir = RuntimeDir::create().unwrap();
        let path;
        {
            let a = Askpass::create(&dir, &Password::new("s3cret")).unwrap();
            path = a.file.clone();
            let meta = std::fs::metadata(&path).unwrap();
            assert_eq!(meta.permissions().mode() & 0o777, 0o600);
            assert_eq!(std::fs::read_to_string(&path).unwrap(), "s3cret");
        }
        assert!(!path.exists());
        assert_eq!(format!("{:?}", Password::new("x")), "Password(<hidden>)");
    }
}
