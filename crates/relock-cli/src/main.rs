//! The `relock` command. Everything lives in the `relock_cli` library.

fn main() -> std::process::ExitCode {
    relock_cli::main()
}
