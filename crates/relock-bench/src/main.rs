//! The `relock-bench` command. Everything lives in the `relock_bench` library.

fn main() -> std::process::ExitCode {
    relock_bench::main()
}
