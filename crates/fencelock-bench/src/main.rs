//! The `fencelock-bench` command. Everything lives in the `fencelock_bench` library.

fn main() -> std::process::ExitCode {
    fencelock_bench::main()
}
