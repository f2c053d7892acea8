//! The `adeadvm` command line. All work is done by the library; this file parses arguments,
//! turns errors into one clear message on stderr, and picks the exit status:
//! 0 success, 1 the input or the run failed, 2 the command line was wrong.

mod cli;

fn main() {
    let code = cli::main();
    #[cfg(unix)]
    if adeadvm::exec::vulkan::any_device_hung() {
        // GPU work that did not finish in time may still be running in the driver, and its
        // teardown at exit can crash under it: leave without exit handlers, after writing out
        // what was printed (the error saying so is on stderr).
        use std::io::Write;
        let _ = std::io::stdout().flush();
        let _ = std::io::stderr().flush();
        // SAFETY: `_exit` ends the process at once; every output file was already completed
        // or removed by the command (they are written atomically), and nothing runs after it.
        unsafe { libc::_exit(code) }
    }
    std::process::exit(code);
}
