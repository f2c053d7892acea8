//! Host tensors and the 64-byte aligned buffers behind them and behind the arena.

use bytemuck::{Pod, Zeroable};

use crate::isa::DType;
use crate::numerics as nx;

/// One cache line; buffers are vectors of these so every buffer starts 64-byte aligned.
#[derive(Clone, Copy, Pod, Zeroable)]
#[repr(C, align(64))]
struct Line([u8; 64]);

/// Buffers from this size on ask for transparent huge pages, as numpy does for its arrays:
/// kernels streaming through hundreds of MiB otherwise lose much of their time to TLB misses
/// where the system gives huge pages only on request (THP "madvise" mode).
const HUGE_MIN: usize = 4 << 20;

/// Asks the kernel to back the whole 2 MiB pages inside `ptr[..len]` with huge pages. Only
/// advice: failure changes nothing and is ignored.
#[cfg(target_os = "linux")]
fn advise_huge(ptr: *mut u8, len: usize) {
    extern "C" {
        fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
    }
    const MADV_HUGEPAGE: i32 = 14;
    const HUGE: usize = 2 << 20;
    let start = (ptr as usize).next_multiple_of(HUGE);
    let end = (ptr as usize + len) / HUGE * HUGE;
    if end > start {
        // SAFETY: the range lies inside an allocation the caller owns; MADV_HUGEPAGE only
        // changes how the kernel backs it, never its contents or validity.
        unsafe { madvise(start as *mut std::ffi::c_void, end - start, MADV_HUGEPAGE) };
    }
}
#[cfg(not(target_os = "linux"))]
fn advise_huge(_: *mut u8, _: usize) {}

/// A zero-initialized, 64-byte aligned byte buffer.
#[derive(Clone, Default)]
pub struct AlignedBuf {
    lines: Vec<Line>,
    len: usize,
}

impl AlignedBuf {
    /// A buffer of `len` zero bytes; None when the allocation fails (out of memory).
    pub fn zeroed(len: usize) -> Option<AlignedBuf> {
        let n = len.div_ceil(64);
        let mut lines = Vec::new();
        lines.try_reserve_exact(n).ok()?;
        if len >= HUGE_MIN {
            // Before the first touch, so the pages are huge from the start.
            advise_huge(lines.as_mut_ptr() as *mut u8, n * 64);
        }
        lines.resize(n, Line([0; 64]));
        Some(AlignedBuf { lines, len })
    }
    /// Copies bytes into a new aligned buffer.
    pub fn from_bytes(bytes: &[u8]) -> Option<AlignedBuf> {
        let mut b = AlignedBuf::zeroed(bytes.len())?;
        b.bytes_mut().copy_from_slice(bytes);
        Some(b)
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Whether the buffer holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &bytemuck::cast_slice(&self.lines)[..self.len]
    }
    /// The bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        &mut bytemuck::cast_slice_mut(&mut self.lines)[..self.len]
    }
}

/// A tensor in host memory with a concrete shape: inputs, outputs, and what the CLI reads and
/// writes as .npy.
#[derive(Clone)]
pub struct HostTensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    buf: AlignedBuf,
}

impl std::fmt::Debug for HostTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "HostTensor({}{:?})", self.dtype, self.shape)
    }
}

impl PartialEq for HostTensor {
    /// Bitwise equality: the comparison determinism is about.
    fn eq(&self, other: &HostTensor) -> bool {
        self.dtype == other.dtype && self.shape == other.shape && self.bytes() == other.bytes()
    }
}

/// Element count of a shape, or None on overflow.
pub fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d))
}

impl HostTensor {
    /// A tensor from raw little-endian bytes; None when the byte count does not match.
    pub fn from_bytes(dtype: DType, shape: Vec<usize>, bytes: &[u8]) -> Option<HostTensor> {
        let n = element_count(&shape)?.checked_mul(dtype.size())?;
        if n != bytes.len() {
            return None;
        }
        Some(HostTensor { dtype, shape, buf: AlignedBuf::from_bytes(bytes)? })
    }
    /// An f32 tensor.
    pub fn from_f32(shape: Vec<usize>, values: &[f32]) -> Option<HostTensor> {
        HostTensor::from_bytes(DType::F32, shape, bytemuck::cast_slice(values))
    }
    /// An i32 tensor.
    pub fn from_i32(shape: Vec<usize>, values: &[i32]) -> Option<HostTensor> {
        HostTensor::from_bytes(DType::I32, shape, bytemuck::cast_slice(values))
    }
    /// A zero-filled tensor; None if it cannot be allocated.
    pub fn zeroed(dtype: DType, shape: Vec<usize>) -> Option<HostTensor> {
        let n = element_count(&shape)?.checked_mul(dtype.size())?;
        Some(HostTensor { dtype, shape, buf: AlignedBuf::zeroed(n)? })
    }
    /// Number of elements.
    pub fn len(&self) -> usize {
        self.buf.len() / self.dtype.size()
    }
    /// Whether the tensor has no elements.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
    /// The raw bytes.
    pub fn bytes(&self) -> &[u8] {
        self.buf.bytes()
    }
    /// The raw bytes, writable.
    pub fn bytes_mut(&mut self) -> &mut [u8] {
        self.buf.bytes_mut()
    }
    /// The values as f32 (f16 and bf16 widened exactly); None for i32.
    pub fn to_f32(&self) -> Option<Vec<f32>> {
        match self.dtype {
            DType::F32 => Some(bytemuck::cast_slice(self.bytes()).to_vec()),
            DType::F16 => Some(
                bytemuck::cast_slice::<u8, u16>(self.bytes())
                    .iter()
                    .map(|&h| nx::f16_bits_to_f32(h))
                    .collect(),
            ),
            DType::Bf16 => Some(
                bytemuck::cast_slice::<u8, u16>(self.bytes())
                    .iter()
                    .map(|&h| nx::bf16_bits_to_f32(h))
                    .collect(),
            ),
            DType::I32 => None,
        }
    }
    /// The values as i32; None for float tensors.
    pub fn to_i32(&self) -> Option<Vec<i32>> {
        (self.dtype == DType::I32).then(|| bytemuck::cast_slice(self.bytes()).to_vec())
    }
    /// BLAKE3 of dtype, shape and bytes: what traces record.
    pub fn digest(&self) -> [u8; 32] {
        tensor_digest(self.dtype, &self.shape, self.bytes())
    }
}

/// BLAKE3 over a tensor's dtype, shape and bytes.
pub fn tensor_digest(dtype: DType, shape: &[usize], bytes: &[u8]) -> [u8; 32] {
    let mut h = blake3::Hasher::new();
    h.update(&[dtype as u8, shape.len() as u8]);
    for d in shape {
        h.update(&(*d as u64).to_le_bytes());
    }
    h.update(bytes);
    *h.finalize().as_bytes()
}
