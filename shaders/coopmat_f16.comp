#version 450
// MATMUL of f16 operands on cooperative matrices (VK_NV_cooperative_matrix: 16x16x16 f16 x f16
// + f32 tiles per subgroup of 32), fast tier only: the device's tensor cores sum in an order
// and with roundings of their own, the same bits run to run on one device, not the CPU's.
// Built with --target-env=vulkan1.1 (shaders/build.sh); ops::rows::matmul_coopmat_f16 launches
// it only where the device offers the shape (vulkan::Device::has_coopmat_f16). The NV extension,
// not VK_KHR_cooperative_matrix: the glslang that Debian's glslc 2023.2 carries (the compiler
// CI installs) predates GL_KHR_cooperative_matrix; NVIDIA's drivers offer both.
//
// A workgroup of 4 subgroups computes a 128x128 output tile; subgroup s owns the 64x64 block
// (s / 2, s % 2), as 4x4 accumulator tiles. k is staged 32 at a time: each operand tile goes to
// shared memory in its stored orientation (rows of its contiguous dimension, 8 halves of
// padding a row), and coopMatLoad reads it row- or column-major as the transpose flags say.
// The next chunk's global loads are in registers while the current chunk multiplies.
// Epilogue: each accumulator tile goes through shared memory so that threads can add the bias
// (f32), apply RELU and write f32 or f16 (flag bit 5) with bounds checks.
#extension GL_GOOGLE_include_directive : require
#extension GL_NV_cooperative_matrix : require
#extension GL_KHR_memory_scope_semantics : require
#extension GL_KHR_shader_subgroup_basic : require
#extension GL_EXT_shader_explicit_arithmetic_types_float16 : require
#extension GL_EXT_shader_16bit_storage : require
#extension GL_EXT_control_flow_attributes : require
#include "matmul_common.glsl"

// The output tile (CM_BM x CM_BN), the subgroup grid (CM_WARPS_M x CM_WARPS_N subgroups of 32)
// and k staged per chunk. Measured on an H100 (TFLOP/s at 4096^2): 128x128 in 2x4 subgroups k by
// 32 79, by 64 100; 2x2 by 32 102 (chosen: less shared memory), by 64 86 (255 registers); 4x2
// by 64 101. At 8192^2 (session 5): the chosen one 132; 2x2 by 16 96; 4x2 and 2x4 by 32 92;
// 256x128 in 4x2 by 16 108, 128x256 in 2x4 by 16 112 (larger tiles fit the 48 KiB only with
// k by 16). A launch covers 128x128 tiles (ops::rows::matmul_coopmat_f16), so larger tiles
// work as they are (the spare workgroups return) but smaller ones need the launcher changed.
// Session 7, with ALIGNED below: 143 at 4096^2, 163 at 8192^2, 114 at 2048^2. Workgroup-scope
// matrices (VK_NV_cooperative_matrix2: one 256x128 matrix a workgroup of 256, loaded by tensor
// addressing, the driver staging it) measured 157, 165 and 126 at their best tile (branch
// coopmat2-experiment); not taken, as ~10% did not pay for a second shader compiler (CI's glslc
// predates GL_NV_cooperative_matrix2). Neither reaches Hopper's warpgroup MMA.
#ifndef CM_WARPS_M
#define CM_WARPS_M 2
#define CM_WARPS_N 2
#endif
#ifndef CM_BK
#define CM_BK 32
#endif
#define CM_WG (32 * CM_WARPS_M * CM_WARPS_N)
layout(local_size_x = CM_WG) in;
// Set by ops::rows::matmul_coopmat_f16 where M and N are whole multiples of the tile, K of BK,
// and both operands' contiguous dimensions and batch strides of 8: then no load needs a bounds
// check (measured on an H100 at 8192^2: 132 -> 154 TFLOP/s; session 7: 163).
layout(constant_id = 0) const bool ALIGNED = false;

#ifndef CM_BM // multiples of 128
#define CM_BM 128
#define CM_BN 128
#endif
const uint BM = CM_BM;
const uint BN = CM_BN;
const uint BK = CM_BK;
const uint WG = CM_WG;
const uint PAD = 8u;               // halves of padding per staged row
const uint WARPS_N = CM_WARPS_N;
const uint WM = BM / CM_WARPS_M;   // a subgroup's block
const uint WN = BN / CM_WARPS_N;
const uint LOADS_A = BM * BK / (8u * WG); // runs of 8 halves each thread stages of a
const uint LOADS_B = BN * BK / (8u * WG); // and of b
const uint FM = WM / 16u;          // accumulator tiles per subgroup
const uint FN = WN / 16u;
const uint PITCH_K = BK + PAD;     // halves per staged row when k is contiguous
const uint PITCH_AM = BM + PAD;    // halves per staged row of a when m is contiguous
const uint PITCH_BN = BN + PAD;    // halves per staged row of b when n is contiguous
// Halves per staged operand (the larger of its two layouts).
const uint STAGE_A = max(BM * PITCH_K, BK * PITCH_AM);
const uint STAGE_B = max(BN * PITCH_K, BK * PITCH_BN);

// f16 views of the operands and the output (same bindings as matmul_common's f32 views).
layout(set = 0, binding = 0) buffer Y16 { float16_t y16[]; };
layout(set = 0, binding = 1) readonly buffer A8 { uvec4 a8[]; };   // 8 halves a element
layout(set = 0, binding = 2) readonly buffer B8 { uvec4 b8[]; };
layout(set = 0, binding = 1) readonly buffer A16 { float16_t a16[]; };
layout(set = 0, binding = 2) readonly buffer B16 { float16_t b16[]; };

#ifndef CM_STAGES
#define CM_STAGES 2
#endif
const uint STAGE8_A = STAGE_A / 8u; // uvec4s per staged operand
const uint STAGE8_B = STAGE_B / 8u;
shared uvec4 As[CM_STAGES * STAGE8_A]; // 8 halves an element: coopMatLoadNV reads them as f16
shared uvec4 Bs[CM_STAGES * STAGE8_B];
shared float Cs[(WG / 32u) * 256u]; // one 16x16 accumulator tile per subgroup, for the epilogue

uint M, N, K, row0, col0, aoff, boff;
bool ta, tb, a_vec, b_vec;
uvec4 ra[LOADS_A], rb[LOADS_B]; // the next chunk (8 halves each), between global and shared

// Eight consecutive halves of a stored operand from element `base`, `n_in` of them in range.
#define COOPMAT_LOAD8(name, x8, x16, vec_ok)                                          \
    uvec4 name(uint base, uint n_in) {                                                \
        if (ALIGNED || (n_in >= 8u && vec_ok)) {                                      \
            return x8[base / 8u];                                                     \
        }                                                                             \
        float16_t h[8];                                                               \
        [[unroll]] for (uint e = 0u; e < 8u; e++) {                                   \
            h[e] = e < n_in ? x16[base + e] : float16_t(0.0);                         \
        }                                                                             \
        return uvec4(packFloat2x16(f16vec2(h[0], h[1])), packFloat2x16(f16vec2(h[2], h[3])), \
                     packFloat2x16(f16vec2(h[4], h[5])), packFloat2x16(f16vec2(h[6], h[7]))); \
    }
COOPMAT_LOAD8(load8_a, a8, a16, a_vec)
COOPMAT_LOAD8(load8_b, b8, b16, b_vec)

uint in_range8(uint first, uint end) { return first >= end ? 0u : min(end - first, 8u); }

// Load `l` of this thread: a staged tile has BM * BK / 8 runs of 8 halves.
// (Under ALIGNED every run is in range: the checks fold away when the pipeline is built.)
uvec4 load_a(uint l, uint k0) {
    uint idx = l * WG + gl_LocalInvocationID.x;
    if (!ta) { // [M, K]: 128 rows of m, BK / 8 runs of k each
        uint r = idx / (BK / 8u), c = (idx % (BK / 8u)) * 8u;
        return ALIGNED || row0 + r < M ? load8_a(aoff + (row0 + r) * K + k0 + c, in_range8(k0 + c, K)) : uvec4(0u);
    }
    uint r = idx / (BM / 8u), c = (idx % (BM / 8u)) * 8u; // [K, M]: BK rows of k, BM / 8 runs of m
    return ALIGNED || k0 + r < K ? load8_a(aoff + (k0 + r) * M + row0 + c, in_range8(row0 + c, M)) : uvec4(0u);
}
uvec4 load_b(uint l, uint k0) {
    uint idx = l * WG + gl_LocalInvocationID.x;
    if (tb) { // [N, K]: 128 rows of n, BK / 8 runs of k
        uint r = idx / (BK / 8u), c = (idx % (BK / 8u)) * 8u;
        return ALIGNED || col0 + r < N ? load8_b(boff + (col0 + r) * K + k0 + c, in_range8(k0 + c, K)) : uvec4(0u);
    }
    uint r = idx / (BN / 8u), c = (idx % (BN / 8u)) * 8u; // [K, N]: BK rows of k, BN / 8 runs of n
    return ALIGNED || k0 + r < K ? load8_b(boff + (k0 + r) * N + col0 + c, in_range8(col0 + c, N)) : uvec4(0u);
}

// Where run `l` of this thread goes in its staged tile (BX elements of the other dimension,
// rows of PITCH_X halves when that dimension is contiguous), in units of 8 halves.
uint stage_at(uint l, bool k_contiguous, uint BX, uint PITCH_X) {
    uint idx = l * WG + gl_LocalInvocationID.x;
    return k_contiguous ? ((idx / (BK / 8u)) * PITCH_K + (idx % (BK / 8u)) * 8u) / 8u
                        : ((idx / (BX / 8u)) * PITCH_X + (idx % (BX / 8u)) * 8u) / 8u;
}

void store_chunk(uint buf) {
    [[unroll]] for (uint l = 0u; l < LOADS_A; l++) {
        As[buf * STAGE8_A + stage_at(l, !ta, BM, PITCH_AM)] = ra[l];
    }
    [[unroll]] for (uint l = 0u; l < LOADS_B; l++) {
        Bs[buf * STAGE8_B + stage_at(l, tb, BN, PITCH_BN)] = rb[l];
    }
}

void load_chunk(uint k0) {
    [[unroll]] for (uint l = 0u; l < LOADS_A; l++) {
        ra[l] = load_a(l, k0);
    }
    [[unroll]] for (uint l = 0u; l < LOADS_B; l++) {
        rb[l] = load_b(l, k0);
    }
}

void main() {
    M = p.m;
    N = p.n;
    K = p.k;
    ta = (p.flags & 1u) != 0u;
    tb = (p.flags & 2u) != 0u;
    uint act = (p.flags >> 2) & 3u;
    bool has_bias = (p.flags & 16u) != 0u;
    bool y_half = (p.flags & 32u) != 0u;
    uint tiles_m = (M + BM - 1u) / BM;
    uint tiles_n = (N + BN - 1u) / BN;
    uint batches = matmul_batches();
    uint tile = (gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (tile >= batches * tiles_m * tiles_n) {
        return; // the grid's spare workgroups (uniform: before any barrier)
    }
    uint bz = tile / (tiles_n * tiles_m);
    row0 = ((tile / tiles_n) % tiles_m) * BM;
    col0 = (tile % tiles_n) * BN;
    uint coff;
    matmul_batch_offsets(bz, aoff, boff, coff);
    a_vec = ((ta ? M : K) % 8u) == 0u && (aoff % 8u) == 0u;
    b_vec = ((tb ? K : N) % 8u) == 0u && (boff % 8u) == 0u;
    uint yoff = bz * M * N;
    uint s = gl_SubgroupID;
    uint wm = (s / WARPS_N) * WM, wn = (s % WARPS_N) * WN; // this subgroup's block within the tile

    fcoopmatNV<32, gl_ScopeSubgroup, 16, 16> acc[FM][FN];
    [[unroll]] for (uint i = 0u; i < FM; i++) {
        [[unroll]] for (uint j = 0u; j < FN; j++) {
            acc[i][j] = fcoopmatNV<32, gl_ScopeSubgroup, 16, 16>(0.0);
        }
    }

    load_chunk(0u);
#if CM_STAGES == 2
    // Two shared buffers: chunk j multiplies from buffer j % 2 while chunk j + 1's global loads
    // are in flight, then go to the other buffer; one barrier a chunk.
    store_chunk(0u);
    barrier();
    uint buf = 0u;
    for (uint k0 = 0u; k0 < K; k0 += BK) {
        bool more = k0 + BK < K;
        if (more) {
            load_chunk(k0 + BK);
        }
        uint base_a = buf * STAGE8_A, base_b = buf * STAGE8_B;
#else
    for (uint k0 = 0u; k0 < K; k0 += BK) {
        store_chunk(0u);
        barrier();
        if (k0 + BK < K) {
            load_chunk(k0 + BK); // in flight while this chunk multiplies
        }
        const uint base_a = 0u, base_b = 0u;
#endif
        [[unroll]] for (uint kk = 0u; kk < BK; kk += 16u) {
            fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> fa[FM];
            fcoopmatNV<16, gl_ScopeSubgroup, 16, 16> fb[FN];
            [[unroll]] for (uint i = 0u; i < FM; i++) {
                uint r = wm + i * 16u;
                if (!ta) {
                    coopMatLoadNV(fa[i], As, base_a + (r * PITCH_K + kk) / 8u, PITCH_K / 8u, false);
                } else {
                    coopMatLoadNV(fa[i], As, base_a + (kk * PITCH_AM + r) / 8u, PITCH_AM / 8u, true);
                }
            }
            [[unroll]] for (uint j = 0u; j < FN; j++) {
                uint c = wn + j * 16u;
                if (!tb) {
                    coopMatLoadNV(fb[j], Bs, base_b + (kk * PITCH_BN + c) / 8u, PITCH_BN / 8u, false);
                } else {
                    coopMatLoadNV(fb[j], Bs, base_b + (c * PITCH_K + kk) / 8u, PITCH_K / 8u, true);
                }
            }
            [[unroll]] for (uint i = 0u; i < FM; i++) {
                [[unroll]] for (uint j = 0u; j < FN; j++) {
                    acc[i][j] = coopMatMulAddNV(fa[i], fb[j], acc[i][j]);
                }
            }
        }
#if CM_STAGES == 2
        if (more) {
            store_chunk(buf ^ 1u);
        }
        buf ^= 1u;
#endif
        barrier(); // the next chunk is staged, and every subgroup is done reading this one
    }

    // Epilogue, one accumulator tile at a time through this subgroup's 16x16 of Cs: lane l
    // finishes row l / 2, columns (l % 2) * 8 .. + 8.
    uint lane = gl_SubgroupInvocationID;
    [[unroll]] for (uint i = 0u; i < FM; i++) {
        [[unroll]] for (uint j = 0u; j < FN; j++) {
            coopMatStoreNV(acc[i][j], Cs, s * 256u, 16u, false);
            subgroupMemoryBarrierShared();
            subgroupBarrier();
            uint r = row0 + wm + i * 16u + lane / 2u;
            uint c0 = col0 + wn + j * 16u + (lane % 2u) * 8u;
            [[unroll]] for (uint e = 0u; e < 8u; e++) {
                uint c = c0 + e;
                if (r < M && c < N) {
                    float x = Cs[s * 256u + (lane / 2u) * 16u + (lane % 2u) * 8u + e];
                    if (has_bias) {
                        x += bias[coff + r * p.bias_sm + c * p.bias_sn];
                    }
                    if (act == 1u) {
                        x = max(x, 0.0);
                    }
                    if (y_half) {
                        y16[yoff + r * N + c] = float16_t(x);
                    } else {
                        y[yoff + r * N + c] = x;
                    }
                }
            }
            subgroupBarrier(); // Cs is read before the next tile overwrites it
        }
    }
}
