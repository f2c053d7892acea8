// coopmat2.glsl -- MATMUL of 16-bit float operands (CM2_T: float16_t or bfloat16_t, defined by
// shaders/coopmat2_{f16,bf16}.comp) on workgroup-scope cooperative matrices
// (VK_NV_cooperative_matrix2), fast tier only: the device's tensor cores sum in an order and
// with roundings of their own, the same bits run to run on one device, not the CPU's. The whole
// BM x BN tile is one matrix of the workgroup, loaded from global memory by tensor addressing;
// the driver chooses the staging through shared memory and the instructions.
// ops::rows::matmul_coopmat launches it only where vulkan::coopmat2::probe found the features
// and a workgroup-scope shape of this operand type for workgroups of 128 whose granularity
// divides the tile.
//
// Layout: the driver's code (SASS, from its shader cache, by scripts/nvidia-sass.py) is
// Ampere's warp MMA (HMMA.16816.F32), which takes both operands as pairs along k: a stored
// [M, K] is staged through shared memory with 128-bit loads and read by LDSM, but b stored
// [K, N] was gathered with 16-bit global loads, and a stored [K, M] ran at 12-56 TFLOP/s. So
// ops::rows::matmul_coopmat restages such operands (one transpose into scratch,
// shaders/transpose16.comp) and this kernel mostly runs a [M, K] with b [N, K]. Measured on an
// H200 (driver 580, f16, 4096^2, TFLOP/s): b [K, N] 148, b [N, K] 178, both with 256x128 tiles
// rolled; restaged (the transpose included) 172.
//
// Tiles (operands restaged; the sweeps are beside ops::rows::COOPMAT2_TILE): workgroups of 128
// with 128x128 tiles, k by 64, four chunks a loop iteration: 291 at 4096^2, 324 at 8192^2, 217
// at 2048^2 on an H200, from workgroups of 256 with 128x256 tiles, eight chunks an iteration:
// 251, 274 and 189 (the same runs); those had come from 249 at 4096^2 against 172 with
// the 256x128 tile rolled (unrolling did not help that tile: 129 by 4 chunks, 118 by 8). The
// subgroup-scope kernel this replaced (16x16 matrices a subgroup,
// staged by hand through shared memory, 128x128 tiles) gave 144 on an H100. Earlier on an H100
// the 256x128 tile unrolled by 4 ran at 157 from a warm driver shader cache but 34-38 in about
// half the processes that compiled it afresh. Such slow processes remain, on the H200 too (shader
// disk cache off, so every process compiles afresh; no other change): the 128x256 tile of 256
// ran at 74-87 instead of 274 in 2 of 6 processes at 8192^2 and at 50-60 in some others, the
// 128x128 tile of 128 at 66 instead of 324 in 1 of about 30 (and in none of 12 at 4096^2).
// They were short bench runs timed right after the pipeline's build (H200, 2026-11-27, 4096^2,
// 20 timed repetitions, fresh compiles with ADEADVM_VULKAN_PIPELINE_STATS, which lengthens
// them): `adeadvm bench` counted the build in its quarter second of warm-up, and 6 of 40
// processes read 58-70 instead of 290; with the warm-up counted after the first run, 0 of 28
// (1 of 14 with none). The driver's statistics (255 registers, 119424 bytes of code) were the
// same in slow and fast processes, none of 24 taking the pipeline from the driver's shader
// cache was slow, nor any of 38 timing 3000-6000 repetitions. A larger kernel (GELU in this
// epilogue, not kept) was slow in 8 of 16 even after the warm-up, so the cause is not settled.
// Measured and not kept (H200, f16 at 4096^2, this tile, the same runs at 290): tiles taken in
// groups of 4, 8 or 16 tile rows (for the L2 cache) 287-290; loading the next chunk's matrices
// before each multiply (so the driver could overlap them) 20, the loaded matrices then spilling.
// Staging b [K, N] by hand (128-bit loads into a padded shared chunk, coopMatLoad from there)
// removed the gathers but ran slower than the driver's: 127 against 138. (A shared array sized
// by a ?: of specialization constants crashed the driver's compiler.) cuBLAS's fp16 GEMM runs
// at 650-760 on Hopper's warpgroup MMA (wgmma), which this driver does not emit for either
// scope.
//
// Built by shaders/glslang_cm2.py (a glslang with GL_NV_cooperative_matrix2 and
// GL_EXT_bfloat16; the glslc CI installs predates both), not glslc; tests/vulkan.rs checks the
// committed SPIR-V is current where that compiler is found (CI installs it).
#ifndef ADEADVM_COOPMAT2_GLSL
#define ADEADVM_COOPMAT2_GLSL
#include "matmul_common.glsl"

// The workgroup size: vulkan::coopmat2::WORKGROUP (the probe asks the driver for shapes at
// exactly this many invocations).
// Four subgroups: a 128x128 tile then takes 255 registers a thread, so two workgroups share a
// multiprocessor and one's staging overlaps the other's multiplies (one of 256 filled it alone;
// see ops::rows::COOPMAT2_TILE for the measurements).
layout(local_size_x = 128) in;
// Bit 0: the matmul is whole tiles with every operand read in runs of 8 elements (16 bytes;
// MatmulPlan::aligned_to): loads without clamping. Bit 1: a is stored [K, M]; bit 2: b is stored [N, K].
layout(constant_id = 0) const uint SHAPE = 0u;
// The output tile and the k chunk (ops::rows::COOPMAT2_TILE; multiples of the granularity the
// probe found).
layout(constant_id = 1) const uint BM = 128u;
layout(constant_id = 2) const uint BN = 128u;
layout(constant_id = 3) const uint BK = 32u;
// Chunks of k per iteration of the unclamped loop, unrolled.
layout(constant_id = 4) const uint UNROLL = 4u;
const bool ALIGNED = (SHAPE & 1u) != 0u;
const bool TA = (SHAPE & 2u) != 0u;
const bool TB = (SHAPE & 4u) != 0u;

// 16-bit views of the operands and the output (same bindings as matmul_common's f32 views).
layout(set = 0, binding = 0) buffer Y16 { CM2_T y16[]; };
layout(set = 0, binding = 1) readonly buffer A16 { CM2_T a16[]; };
layout(set = 0, binding = 2) readonly buffer B16 { CM2_T b16[]; };

#define ACC coopmat<float, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>
#define MAT_A coopmat<CM2_T, gl_ScopeWorkgroup, BM, BK, gl_MatrixUseA>
#define MAT_B coopmat<CM2_T, gl_ScopeWorkgroup, BK, BN, gl_MatrixUseB>
#define CLAMP gl_CooperativeMatrixClampModeConstantNV

// The epilogue's inputs (coopMatPerElementNV calls `finish` with a tile's row and column).
uint row0, col0, coff;
bool has_bias;
uint act;

// reference: act(acc + bias[broadcast]) at output (row0 + r, col0 + c).
float finish(const in uint32_t r, const in uint32_t c, const in float x) {
    float v = x;
    uint gr = row0 + r, gc = col0 + c;
    if (has_bias && gr < p.m && gc < p.n) {
        v += bias[coff + gr * p.bias_sm + gc * p.bias_sn];
    }
    if (act == 1u) {
        v = max(v, 0.0);
    }
    return v;
}

// One chunk of k from k0: acc += a[row0.., k0..] * b[k0.., col0..], from layouts `la` and `lb`
// (dimensions in stored order: [M, K] or [K, M] for a, [K, N] or [N, K] for b); `tr` reads a
// stored transpose.
#define K_STEP(la, lb, k0)                                                                     \
    {                                                                                          \
        MAT_A ma;                                                                              \
        MAT_B mb;                                                                              \
        if (TA) {                                                                              \
            coopMatLoadTensorNV(ma, a16, aoff, sliceTensorLayoutNV(la, k0, BK, row0, BM), tr); \
        } else {                                                                               \
            coopMatLoadTensorNV(ma, a16, aoff, sliceTensorLayoutNV(la, row0, BM, k0, BK));     \
        }                                                                                      \
        if (TB) {                                                                              \
            coopMatLoadTensorNV(mb, b16, boff, sliceTensorLayoutNV(lb, col0, BN, k0, BK), tr); \
        } else {                                                                               \
            coopMatLoadTensorNV(mb, b16, boff, sliceTensorLayoutNV(lb, k0, BK, col0, BN));     \
        }                                                                                      \
        acc = coopMatMulAdd(ma, mb, acc);                                                      \
    }

void main() {
    uint M = p.m, N = p.n, K = p.k;
    act = (p.flags >> 2) & 3u;
    has_bias = (p.flags & 16u) != 0u;
    bool y_narrow = (p.flags & 32u) != 0u; // y holds CM2_T, else f32
    uint tiles_m = (M + BM - 1u) / BM;
    uint tiles_n = (N + BN - 1u) / BN;
    uint tile = (gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (tile >= matmul_batches() * tiles_m * tiles_n) {
        return; // the grid's spare workgroups (uniform)
    }
    uint bz = tile / (tiles_n * tiles_m);
    row0 = ((tile / tiles_n) % tiles_m) * BM;
    col0 = (tile % tiles_n) * BN;
    uint aoff, boff;
    matmul_batch_offsets(bz, aoff, boff, coff);
    uint yoff = bz * M * N;
    if (ALIGNED) {
        // Tell the compiler what aligned_to proved: every row and batch starts on 8 halves
        // (16 bytes), so whole-vector loads need no run-time check.
        aoff &= ~7u;
        boff &= ~7u;
        M &= ~7u;
        N &= ~7u;
        K &= ~7u;
    }
    tensorViewNV<2, false, 1, 0> tr = createTensorViewNV(2, false, 1, 0);
    ACC acc = ACC(0.0);
    if (ALIGNED) {
        tensorLayoutNV<2> la = createTensorLayoutNV(2);
        tensorLayoutNV<2> lb = createTensorLayoutNV(2);
        la = TA ? setTensorLayoutDimensionNV(la, K, M) : setTensorLayoutDimensionNV(la, M, K);
        lb = TB ? setTensorLayoutDimensionNV(lb, N, K) : setTensorLayoutDimensionNV(lb, K, N);
        // UNROLL chunks at a time, then the rest one by one.
        uint k0 = 0u;
        for (; k0 + UNROLL * BK <= K;) {
            [[unroll]] for (uint j = 0u; j < UNROLL; j++) {
                K_STEP(la, lb, k0)
                k0 += BK;
            }
        }
        for (; k0 < K; k0 += BK) {
            K_STEP(la, lb, k0)
        }
    } else {
        // Out-of-range elements of a partial tile or chunk read as zero.
        tensorLayoutNV<2, CLAMP> la = createTensorLayoutNV(2, CLAMP);
        tensorLayoutNV<2, CLAMP> lb = createTensorLayoutNV(2, CLAMP);
        la = TA ? setTensorLayoutDimensionNV(la, K, M) : setTensorLayoutDimensionNV(la, M, K);
        lb = TB ? setTensorLayoutDimensionNV(lb, N, K) : setTensorLayoutDimensionNV(lb, K, N);
        for (uint k0 = 0u; k0 < K; k0 += BK) {
            K_STEP(la, lb, k0)
        }
    }
    if (has_bias || act != 0u) {
        coopMatPerElementNV(acc, acc, finish);
    }
    // Stores outside [M, N] are dropped, so a partial tile writes only its part.
    tensorLayoutNV<2, CLAMP> ly = createTensorLayoutNV(2, CLAMP);
    ly = setTensorLayoutDimensionNV(ly, M, N);
    if (y_narrow) {
        coopmat<CM2_T, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator> h =
            coopmat<CM2_T, gl_ScopeWorkgroup, BM, BN, gl_MatrixUseAccumulator>(acc);
        coopMatStoreTensorNV(h, y16, yoff, sliceTensorLayoutNV(ly, row0, BM, col0, BN));
    } else {
        coopMatStoreTensorNV(acc, y, yoff, sliceTensorLayoutNV(ly, row0, BM, col0, BN));
    }
}

#endif // ADEADVM_COOPMAT2_GLSL
