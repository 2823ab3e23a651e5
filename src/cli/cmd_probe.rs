//! `spark-launch probe`: this machine's (or a snapshot's) RDMA/NIC facts, or a snapshot capture.

use std::path::PathBuf;

use super::{CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::probe::{self, MemTree, read_facts};

#[derive(Debug, clap::Args)]
pub struct ProbeArgs {
    /// Read a snapshot folder instead of the live machine.
    #[arg(long, value_name = "DIR", conflicts_with = "capture")]
    pub root: Option<PathBuf>,

    /// Write a snapshot of the live machine into DIR (attach it to a bug report), with the
    /// cabling it can see (`links/`: who answers on each fabric port) and, as root, its
    /// netplan files.
    #[arg(long, value_name = "DIR")]
    pub capture: Option<PathBuf>,
}

pub async fn run(args: ProbeArgs, ctx: &Context) -> CmdResult {
    if let Some(dir) = &args.capture {
        let step = ctx.reporter.step("probe this machine");
        let tree = probe::live::capture_local()?;
        let facts = read_facts(&tree)?;
        let written = write_capture(&tree, dir)?;
        step.ok_with(&format!("{written} files written to {}", dir.display()));
        if ctx.json {
            print_json(&facts)?;
        } else {
            print_out(&format!(
                "captured {} ({} interfaces, {} RDMA devices) into {}\nread it back with: spark-launch probe --root {}",
                facts.hostname,
                facts.interfaces.len(),
                facts.rdma_devices.len(),
                dir.display(),
                dir.display()
            ));
        }
        return Ok(Outcome::Success);
    }
    let facts = match &args.root {
        Some(dir) => probe::read_snapshot_dir(dir).invalid()?,
        None => read_facts(&probe::live::snapshot_local()?)?,
    };
    if ctx.json {
        print_json(&facts)?;
    } else {
        print_out(&crate::report::facts::text(&facts));
    }
    Ok(Outcome::Success)
}

fn write_capture(tree: &MemTree, dir: &std::path::Path) -> Result<usize, anyhow::Error> {
    if dir.exists() && std::fs::read_dir(dir)?.next().is_some() {
        anyhow::bail!(
            "{} is not empty: capture into a new folder so nothing of yours is overwritten",
            dir.display()
        );
    }
    Ok(tree.write_to(dir)?)
}
