//! Fault injection for the Vulkan failure paths real hardware reaches rarely: running out of
//! device memory in the middle of a run, and losing the device. Tests (tests/robustness.rs)
//! set [`FAULT_ENV`] on an `adeadvm` child process and check what a user would see.
//!
//! `ADEADVM_VULKAN_FAULT=oom-after=N`: the first N device buffer allocations of the process
//! succeed and every later one fails as VMA does when device memory is exhausted
//! (`VK_ERROR_OUT_OF_DEVICE_MEMORY`). `ADEADVM_VULKAN_FAULT=lost-after=N`: the first N queue
//! submissions succeed and every later one fails as a lost device does (`VK_ERROR_DEVICE_LOST`,
//! nothing submitted). `ADEADVM_VULKAN_FAULT=timeout-after=N`: the first N waits for a batch
//! succeed and every later one reports that the GPU did not finish in time, as a hung GPU
//! would (the work itself still runs; the stream then refuses further work and waits for the
//! device before freeing anything). Unset, or any other value, injects nothing; the cost is one atomic
//! load per allocation or submission. It only ever makes calls fail the way the driver could,
//! so it cannot make a run produce wrong results, only the errors under test.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The environment variable that asks for an injected fault.
pub const FAULT_ENV: &str = "ADEADVM_VULKAN_FAULT";

/// Which calls fail, each after the given number of successful ones.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fault {
    OutOfDeviceMemory(u64),
    DeviceLost(u64),
    Timeout(u64),
}

fn fault() -> Option<Fault> {
    static FAULT: OnceLock<Option<Fault>> = OnceLock::new();
    *FAULT.get_or_init(|| {
        let v = std::env::var(FAULT_ENV).ok()?;
        let (kind, n) = v.trim().split_once('=')?;
        let n = n.trim().parse().ok()?;
        match kind.trim() {
            "oom-after" => Some(Fault::OutOfDeviceMemory(n)),
            "lost-after" => Some(Fault::DeviceLost(n)),
            "timeout-after" => Some(Fault::Timeout(n)),
            _ => None,
        }
    })
}

/// Whether the device buffer allocation about to be made must fail as out of device memory.
pub(crate) fn fail_allocation() -> bool {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    match fault() {
        Some(Fault::OutOfDeviceMemory(n)) => COUNT.fetch_add(1, Ordering::Relaxed) >= n,
        _ => false,
    }
}

/// Whether the queue submission about to be made must fail as a lost device.
pub(crate) fn fail_submission() -> bool {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    match fault() {
        Some(Fault::DeviceLost(n)) => COUNT.fetch_add(1, Ordering::Relaxed) >= n,
        _ => false,
    }
}

/// Whether the wait for the batch just submitted must report a timeout.
pub(crate) fn fail_wait() -> bool {
    static COUNT: AtomicU64 = AtomicU64::new(0);
    match fault() {
        Some(Fault::Timeout(n)) => COUNT.fetch_add(1, Ordering::Relaxed) >= n,
        _ => false,
    }
}
