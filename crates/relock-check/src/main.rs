//! The `relock-check` command. Everything lives in the `relock_check` library.

fn main() -> std::process::ExitCode {
    relock_check::main()
}
