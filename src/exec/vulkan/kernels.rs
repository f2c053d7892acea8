//! The embedded SPIR-V (compiled from shaders/*.comp by shaders/build.sh and committed, so a
//! build needs no glslc) and the op codes the shaders switch on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use super::device::Device;
use super::error::VulkanError;
use super::pipeline::{spirv_words, Kernel};
use crate::exec::cpu::reference::{Binary, Compare, Unary};

/// `(name, bytes of shaders/spv/<name>.spv)` for each name.
macro_rules! embed {
    ($($name:literal,)*) => {
        &[$(($name, include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/shaders/spv/", $name, ".spv")))),*]
    };
}

/// (name, SPIR-V bytes) of every embedded shader; `shaders/<name>.comp` is its source.
pub const SHADERS: &[(&str, &[u8])] = embed![
    "unary",
    "unary_fast",
    "binary",
    "binary_scalar",
    "binary_i32",
    "unary_i32",
    "compare",
    "select",
    "fill",
    "rand",
    "cast",
    "gelu_cast",
    "unpack16",
    "pack16",
    "transpose16",
    "sgemm_split_pieces",
    "sgemm_split_finish",
    "strided_copy",
    "gather",
    "gather_q",
    "matmul_q_vec",
    "matmul_q_tile",
    "scatter",
    "window16",
    "set_word",
    "argmax",
    "softmax",
    "softmax_long",
    "softmax_fast_1x4",
    "softmax_fast_2x4",
    "softmax_fast_4x4",
    "softmax_fast_8x4",
    "softmax_fast_16x4",
    "softmax_fast_32x4",
    "softmax_fast_64x4",
    "softmax_fast_64x8",
    "softmax_fast_64x16",
    "softmax_fast_8",
    "softmax_fast_16",
    "softmax_fast_32",
    "softmax_fast_64",
    "softmax_fast_1024x32",
    "softmax_fast_long",
    "softmax_strict_1x4",
    "softmax_strict_2x4",
    "softmax_strict_4x4",
    "softmax_strict_8x4",
    "softmax_strict_16x4",
    "softmax_strict_32x4",
    "softmax_strict_64x4",
    "softmax_strict_64x8",
    "softmax_strict_64x16",
    "softmax_strict_128x16",
    "softmax_strict_256x16",
    "softmax_strict_256x32",
    "softmax_strict_256x64",
    "layernorm",
    "layernorm_long",
    "layernorm_fast_1x4",
    "layernorm_fast_2x4",
    "layernorm_fast_4x4",
    "layernorm_fast_8x4",
    "layernorm_fast_16x4",
    "layernorm_fast_32x4",
    "layernorm_fast_64x4",
    "layernorm_fast_64x8",
    "layernorm_fast_64x16",
    "layernorm_fast_8",
    "layernorm_fast_16",
    "layernorm_fast_32",
    "layernorm_fast_64",
    "layernorm_fast_1024x32",
    "layernorm_strict_1x4",
    "layernorm_strict_2x4",
    "layernorm_strict_4x4",
    "layernorm_strict_8x4",
    "layernorm_strict_16x4",
    "layernorm_strict_32x4",
    "layernorm_strict_64x4",
    "layernorm_strict_64x8",
    "layernorm_strict_64x16",
    "layernorm_strict_128x16",
    "layernorm_strict_256x16",
    "layernorm_strict_256x32",
    "layernorm_strict_256x64",
    "rmsnorm",
    "rmsnorm_long",
    "rmsnorm_fast_1x4",
    "rmsnorm_fast_2x4",
    "rmsnorm_fast_4x4",
    "rmsnorm_fast_8x4",
    "rmsnorm_fast_16x4",
    "rmsnorm_fast_32x4",
    "rmsnorm_fast_64x4",
    "rmsnorm_fast_64x8",
    "rmsnorm_fast_64x16",
    "rmsnorm_fast_8",
    "rmsnorm_fast_16",
    "rmsnorm_fast_32",
    "rmsnorm_fast_64",
    "rmsnorm_fast_1024x32",
    "rmsnorm_strict_1x4",
    "rmsnorm_strict_2x4",
    "rmsnorm_strict_4x4",
    "rmsnorm_strict_8x4",
    "rmsnorm_strict_16x4",
    "rmsnorm_strict_32x4",
    "rmsnorm_strict_64x4",
    "rmsnorm_strict_64x8",
    "rmsnorm_strict_64x16",
    "rmsnorm_strict_128x16",
    "rmsnorm_strict_256x16",
    "rmsnorm_strict_256x32",
    "rmsnorm_strict_256x64",
    "reduce_1",
    "reduce_8",
    "reduce_32",
    "reduce_256",
    "reduce_lanes",
    "reduce_lanes_strided",
    "coopmat2_f16",
    "coopmat2_bf16",
    "gemm_strict_128x128x32_8x4",
    "gemm_strict_128x128x16_8x4",
    "gemm_strict_128x64x16_8x4",
    "gemm_strict_64x64x16_4x4",
    "gemm_strict_64x64x32_4x4",
    "gemm_strict_64x32x16_4x4",
    "gemm_fast_128x128x32_8x4",
    "gemm_fast_128x128x16_8x4",
    "gemm_fast_128x64x16_8x4",
    "gemm_fast_64x64x16_4x4",
    "gemm_fast_64x64x32_4x4",
    "gemm_fast_64x32x16_4x4",
];

/// Whether shader `name` runs only in the fast tier: it may fuse (FMA) and need not repeat the
/// CPU's bits, so the strict-arithmetic checks of tests/vulkan.rs skip it.
pub fn fast_only(name: &str) -> bool {
    name.starts_with("gemm_fast_")
        || name.contains("_fast")
        || name.starts_with("coopmat")
        || name.starts_with("sgemm_split_")
}

/// Most specialization constants a built-in kernel takes.
const MAX_SPEC: usize = 5;

/// Built pipelines by (shader, specialization constants padded with zeros, their count): a
/// fixed-size key, so the lookup on every dispatch allocates nothing.
type Built = HashMap<(&'static str, [u32; MAX_SPEC], usize), Arc<Kernel>>;

/// The built-in kernels of one device, each pipeline built on first use and kept.
pub struct Kernels {
    dev: Arc<Device>,
    built: Mutex<Built>,
    /// ops::rows::strict_gemm_hw_ftz's probe result, once made.
    pub(crate) hw_ftz: OnceLock<bool>,
}

impl Kernels {
    pub fn new(dev: &Arc<Device>) -> Kernels {
        Kernels { dev: dev.clone(), built: Mutex::new(HashMap::new()), hw_ftz: OnceLock::new() }
    }

    /// The kernel built from `shaders/<name>.comp`.
    pub fn get(&self, name: &'static str) -> Result<Arc<Kernel>, VulkanError> {
        self.specialized(name, &[])
    }

    /// The kernel built from `shaders/<name>.comp` with specialization constants `spec`
    /// (constant id i = `spec[i]`); each combination is built once and kept.
    pub fn specialized(&self, name: &'static str, spec: &[u32]) -> Result<Arc<Kernel>, VulkanError> {
        let fail = |reason: String| VulkanError::PipelineCreation { kernel: name.into(), reason };
        let mut padded = [0u32; MAX_SPEC];
        padded
            .get_mut(..spec.len())
            .ok_or_else(|| fail(format!("{} specialization constants (at most {MAX_SPEC})", spec.len())))?
            .copy_from_slice(spec);
        let key = (name, padded, spec.len());
        let mut built = self.built.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = built.get(&key) {
            return Ok(k.clone());
        }
        let bytes = spirv(name).ok_or_else(|| fail("no such embedded shader".into()))?;
        let words = match override_spirv(name) {
            Some(b) => spirv_words(&b.map_err(fail)?).map_err(fail)?,
            None => spirv_words(bytes).map_err(fail)?,
        };
        let k = Arc::new(Kernel::specialized(&self.dev, name, &words, spec)?);
        built.insert(key, k.clone());
        Ok(k)
    }

    /// The device the kernels are built for.
    pub fn device(&self) -> &Arc<Device> {
        &self.dev
    }
}

/// Environment variable naming a folder whose `<name>.spv` files replace the embedded shaders
/// of those names: a tuning aid for trying compiled variants without rebuilding adeadvm.
pub const SPIRV_DIR_ENV: &str = "ADEADVM_SPIRV_DIR";

/// The bytes of `$ADEADVM_SPIRV_DIR/<name>.spv` when the variable is set and the file exists.
fn override_spirv(name: &str) -> Option<Result<Vec<u8>, String>> {
    let path = std::path::Path::new(&std::env::var_os(SPIRV_DIR_ENV)?).join(format!("{name}.spv"));
    if !path.exists() {
        return None;
    }
    eprintln!("adeadvm: shader {name} from {} ({SPIRV_DIR_ENV})", path.display());
    Some(std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display())))
}

pub(crate) fn spirv(name: &str) -> Option<&'static [u8]> {
    SHADERS.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
}

/// The code of `op` in shaders/include/elementwise.glsl `ew_unary`.
pub fn unary_op_code(op: Unary) -> u32 {
    match op {
        Unary::Neg => 0,
        Unary::Abs => 1,
        Unary::Sqrt => 2,
        Unary::Rsqrt => 3,
        Unary::Exp => 4,
        Unary::Log => 5,
        Unary::Relu => 6,
        Unary::Sigmoid => 7,
        Unary::Tanh => 8,
        Unary::Gelu => 9,
        Unary::Silu => 10,
        Unary::Erf => 11,
    }
}

/// The code of `op` in shaders/include/elementwise.glsl `ew_binary`.
pub fn binary_op_code(op: Binary) -> u32 {
    match op {
        Binary::Add => 0,
        Binary::Sub => 1,
        Binary::Mul => 2,
        Binary::Div => 3,
        Binary::Max => 4,
        Binary::Min => 5,
    }
}

/// The code of `op` in shaders/compare.comp.
pub fn compare_op_code(op: Compare) -> u32 {
    match op {
        Compare::Eq => 0,
        Compare::Lt => 1,
        Compare::Le => 2,
    }
}
