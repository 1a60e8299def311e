//! The `fencelock` command. Everything lives in the `fencelock_cli` library.

fn main() -> std::process::ExitCode {
    fencelock_cli::main()
}
