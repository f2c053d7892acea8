//! Executors: where tensor instructions run.

pub mod cpu;
pub mod vulkan;

/// A tuning switch from the environment: `Some(true)` for `1`, `Some(false)` for `0`, `None`
/// when unset or anything else (which is reported on stderr and ignored). Callers read it once.
pub(crate) fn env_switch(name: &str) -> Option<bool> {
    match std::env::var(name).ok()?.trim() {
        "0" => Some(false),
        "1" => Some(true),
        other => {
            eprintln!("adeadvm: ignoring {name}={other:?}: not 0 or 1");
            None
        }
    }
}
