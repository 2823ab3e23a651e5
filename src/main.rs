//! The `spark-launch` binary: everything lives in the library; see `cli`.

fn main() -> std::process::ExitCode {
    spark_launch::cli::main()
}
