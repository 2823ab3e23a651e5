//! `spark-launch completions SHELL` and `spark-launch man --out DIR`: shell completions and man
//! pages generated from the clap definitions themselves, so they never drift from the flags.
//! Nothing installs them; the README says where they go.

use std::path::PathBuf;

use clap::CommandFactory;

use super::{Cli, CmdResult, Outcome, print_out};

#[derive(Debug, clap::Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    #[arg(value_enum)]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, clap::Args)]
pub struct ManArgs {
    /// The folder to write `spark-launch.1` and `spark-launch-COMMAND.1` into (created).
    #[arg(long, value_name = "DIR", default_value = "man")]
    pub out: PathBuf,
}

/// Prints the completion script on stdout.
pub fn completions(args: CompletionsArgs) -> CmdResult {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "spark-launch", &mut out);
    print_out(&String::from_utf8_lossy(&out));
    Ok(Outcome::Success)
}

/// Writes one man page for the tool and one per command.
pub fn man(args: ManArgs) -> CmdResult {
    std::fs::create_dir_all(&args.out)
        .map_err(|e| anyhow::anyhow!("cannot create {}: {e}", args.out.display()))?;
    clap_mangen::generate_to(Cli::command(), &args.out).map_err(|e| {
        anyhow::anyhow!("cannot write the man pages to {}: {e}", args.out.display())
    })?;
    print_out(&format!("wrote the man pages to {}", args.out.display()));
    Ok(Outcome::Success)
}
