//! `spark-launch report nccl FILE...`: the nccl-tests parser, transport check and verdict of
//! `nccl-test`, applied to saved logs (users paste theirs; support tickets), and with
//! `--plot FILE.svg` the bus bandwidth curves drawn. Exit 0 when every log passed or was only
//! measured, 1 when any failed or stops before its closing lines (a truncated log is
//! incomplete, never measured), 2 when a file cannot be read.

use std::path::PathBuf;

use super::{CmdResult, Context, Invalid, Outcome, print_json, print_out};
use crate::derive::Topology;
use crate::report::nccl::{self, Analysis, ExpectedHcas, Status};
use crate::report::plot;

#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    #[command(subcommand)]
    pub what: What,
}

#[derive(Debug, clap::Subcommand)]
pub enum What {
    /// nccl-tests output (with NCCL_DEBUG=INFO for the transport check): results, the
    /// transport each rank used, and a verdict.
    Nccl(NcclArgs),
}

#[derive(Debug, clap::Args)]
pub struct NcclArgs {
    /// Log files; `-` reads stdin.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// The fabric's shape, for the reference figure (a 3-node ring has its own).
    #[arg(long, value_name = "direct|switch|ring")]
    pub topology: Option<Topology>,

    /// The test binary, for logs of nccl-tests before 2.14 that do not name it.
    #[arg(long, value_name = "NAME")]
    pub test: Option<String>,

    /// The RDMA devices a host must use, as `HOST=dev1,dev2` (repeat per host); without it
    /// the `NCCL_IB_HCA` each log shows is checked.
    #[arg(long = "expect-hca", value_name = "HOST=DEVS", value_parser = nccl::transport::parse_expected_hca)]
    pub expect_hca: Vec<(String, Vec<String>)>,

    /// Also draw bus bandwidth against message size (log2) as an SVG picture, one curve per
    /// test, the figure the fabric must reach as a dashed line.
    #[arg(long, value_name = "FILE.svg", value_parser = plot::svg_path)]
    pub plot: Option<PathBuf>,
}

pub async fn run(args: ReportArgs, ctx: &Context) -> CmdResult {
    match args.what {
        What::Nccl(a) => nccl_logs(a, ctx),
    }
}

fn nccl_logs(args: NcclArgs, ctx: &Context) -> CmdResult {
    let mut expected = ExpectedHcas::new();
    for (host, devs) in &args.expect_hca {
        expected.insert(host.clone(), devs.clone());
    }
    let context = nccl::AnalysisContext {
        expected_hcas: expected,
        topology: args.topology,
        test_hint: args.test.clone(),
        exit_code: None,
    };
    super::check_plot(args.plot.as_deref())?;
    let mut analyses: Vec<Analysis> = Vec::new();
    for file in &args.files {
        let text = read(file).invalid()?;
        let mut a = nccl::analyse(&text, &context);
        a.source = Some(file.display().to_string());
        analyses.push(a);
    }
    let status = nccl::overall(analyses.iter().map(|a| a.status));
    if ctx.json {
        #[derive(serde::Serialize)]
        struct Out<'a> {
            status: Status,
            logs: &'a [Analysis],
        }
        print_json(&Out {
            status,
            logs: &analyses,
        })?;
    } else {
        let texts: Vec<String> = analyses.iter().map(nccl::render::text).collect();
        print_out(&texts.join("\n"));
    }
    if let Some(path) = &args.plot {
        super::write_plot(path, plot::nccl(&analyses), ctx)?;
    }
    Ok(if status.is_bad() {
        Outcome::Failed
    } else {
        Outcome::Success
    })
}

fn read(file: &std::path::Path) -> anyhow::Result<String> {
    // Logs captured from terminals may carry stray bytes; never refuse them for that.
    Ok(crate::input::read_text(file, crate::input::LOG)?)
}
