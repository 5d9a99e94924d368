//! `tinyagents`: the command line. See `tinyagents --help` and docs/cli.md.

fn main() -> std::process::ExitCode {
    tinyagents_cli::main()
}
