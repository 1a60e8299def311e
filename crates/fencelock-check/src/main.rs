//! The `fencelock-check` command. Everything lives in the `fencelock_check` library.

fn main() -> std::process::ExitCode {
    fencelock_check::main()
}
