// gemm.glsl -- the register-tiled MATMUL kernels (shaders/gemm_strict.comp, gemm_fast.comp) for
// act none and relu; GELU stays with matmul.glsl.
//
// Geometry (compiled in, one shader per choice of ops::rows::GemmTile): a workgroup of
// WG = (BM/TM)*(BN/TN) threads computes a BM x BN output tile; each thread owns TM x TN outputs
// as RM = TM/4 row quads and RN = TN/4 column quads spread over the tile (rows
// q*4*(BM/TM) + ty*4 + e), so shared-memory reads are vec4 and conflict-free. k is staged BK at a
// time through two shared buffers: while a thread multiplies chunk j it already holds chunk j+1's
// global loads in registers (vec4 loads when the contiguous dimension is a multiple of 4), so
// one barrier per chunk suffices.
//
// Arithmetic: every output keeps one accumulator that sees k ascending from +0 (resumed from y
// when k_begin > 0: one dispatch covers GEMM_K_SPAN of k, as in matmul.glsl), exactly
// exec::cpu::reference::matmul's order.
//  * gemm_fast (GEMM_FAST): acc = fma(a, b, acc). Fast tier: the same bits run to run.
//  * gemm_strict: operands are flushed (denormal -> signed zero) once, when staged. A product of
//    two floats of magnitude >= 2^-63 (or zero, inf, NaN) is never tiny, so plain `precise`
//    a * b is exactly numerics::mul for it; a chunk in which any staged operand is nonzero and
//    below 2^-63 takes the full strict_mul instead (a workgroup-uniform flag, kept per chunk as
//    the chunk's number in `tiny_chunk`, so it never needs resetting). The sum acc + p is exact
//    IEEE then flushed: in software (strict_ftz), or by the hardware where HW_FTZ is set
//    (ops::rows probes that the device flushes denormal sums exactly so before setting it).
//    NaN needs no canonicalizing before the end: every NaN stays NaN, and the last span
//    canonicalizes. The tail chunk runs exactly its remaining k (an extra +0 product would turn
//    a flushed -0 accumulator into +0).
#ifndef ADEADVM_GEMM_GLSL
#define ADEADVM_GEMM_GLSL
#extension GL_EXT_control_flow_attributes : require
#include "matmul_common.glsl"

// The k one dispatch covers (ops::rows::GEMM_K_SPAN): lavapipe ends a loop after 65535
// iterations of an invocation in all, and the k loops here run a few iterations per k there.
#define GEMM_K_SPAN 2048u

// The geometry is compiled in (GEMM_BM, GEMM_BN, GEMM_BK, GEMM_TM, GEMM_TN, defined by each
// shaders/gemm_*.comp), not specialized: NVIDIA's compiler left loops bounded by specialization
// constants rolled, so the accumulators were indexed at run time and lived in local memory
// (measured on an H100: 1.9 TFLOP/s against 16-23 for the same kernel with literal bounds).
const uint BM = GEMM_BM;
const uint BN = GEMM_BN;
const uint BK = GEMM_BK;
const uint TM = GEMM_TM;
const uint TN = GEMM_TN;
const uint WG = (BM / TM) * (BN / TN);
layout(constant_id = 0) const bool HW_FTZ = false;
layout(local_size_x = (GEMM_BM / GEMM_TM) * (GEMM_BN / GEMM_TN)) in;

// vec4 views of the same bindings (used only when the contiguous dimension is a multiple of 4).
layout(set = 0, binding = 0) buffer Y4 { vec4 y4[]; };
layout(set = 0, binding = 1) readonly buffer A4 { vec4 a4[]; };
layout(set = 0, binding = 2) readonly buffer B4 { vec4 b4[]; };

const uint RM = TM / 4u;   // row quads per thread
const uint RN = TN / 4u;   // column quads per thread
const uint NTM = BM / TM;  // threads along m
const uint NTN = BN / TN;  // threads along n
const uint SA = BM / 4u + 1u; // vec4s per staged k row of a (one vec4 of padding)
const uint SB = BN / 4u + 1u;
const uint LA = (BM * BK) / (4u * WG); // vec4 loads per thread per chunk
const uint LB = (BN * BK) / (4u * WG);

shared vec4 As[2u * BK * SA]; // As[(buf * BK + kk) * SA + r / 4][r % 4] = op(a)[row0 + r, k0 + kk]
shared vec4 Bs[2u * BK * SB]; // Bs[(buf * BK + kk) * SB + c / 4][c % 4] = op(b)[k0 + kk, col0 + c]
shared uint tiny_chunk[2];    // 1 + the last chunk number staged in each buffer with a tiny operand

uint M, N, K, k_end, row0, col0, aoff, boff;
bool ta, tb, a_vec, b_vec;
vec4 ra[LA], rb[LB]; // the next chunk, between its global load and its shared store
uint tx, ty;         // the thread's column and row within the tile's thread grid

// Four consecutive elements of a stored operand along its contiguous dimension: `base` is the
// first's index, `n_in` how many of the four are in range (the rest read as 0). One body for
// both operands (GLSL takes no buffer parameters, hence the macro).
#define GEMM_LOAD4(name, x, x4, vec_ok)                \
    vec4 name(uint base, uint n_in) {                  \
        if (n_in >= 4u && vec_ok) {                    \
            return x4[base / 4u];                      \
        }                                              \
        vec4 v = vec4(0.0);                            \
        [[unroll]] for (uint e = 0u; e < 4u; e++) {    \
            if (e < n_in) v[e] = x[base + e];          \
        }                                              \
        return v;                                      \
    }
GEMM_LOAD4(load4_a, a, a4, a_vec)
GEMM_LOAD4(load4_b, b, b4, b_vec)

uint in_range(uint first, uint end) { return first >= end ? 0u : min(end - first, 4u); }

// Global -> registers for the chunk starting at k0. A stored [M, K] (not ta) is read along k, a
// stored [K, M] (ta) along m; likewise b.
void load_chunk(uint k0) {
    uint t = gl_LocalInvocationID.x;
    [[unroll]] for (uint l = 0u; l < LA; l++) {
        uint idx = l * WG + t;
        if (!ta) {
            uint r = idx / (BK / 4u), kq = idx % (BK / 4u);
            uint gr = row0 + r, gk = k0 + kq * 4u;
            ra[l] = gr < M ? load4_a(aoff + gr * K + gk, in_range(gk, k_end)) : vec4(0.0);
        } else {
            uint kk = idx / (BM / 4u), rq = idx % (BM / 4u);
            uint gk = k0 + kk, gr = row0 + rq * 4u;
            ra[l] = gk < k_end ? load4_a(aoff + gk * M + gr, in_range(gr, M)) : vec4(0.0);
        }
    }
    [[unroll]] for (uint l = 0u; l < LB; l++) {
        uint idx = l * WG + t;
        if (!tb) {
            uint kk = idx / (BN / 4u), cq = idx % (BN / 4u);
            uint gk = k0 + kk, gc = col0 + cq * 4u;
            rb[l] = gk < k_end ? load4_b(boff + gk * N + gc, in_range(gc, N)) : vec4(0.0);
        } else {
            uint c = idx / (BK / 4u), kq = idx % (BK / 4u);
            uint gc = col0 + c, gk = k0 + kq * 4u;
            rb[l] = gc < N ? load4_b(boff + gc * K + gk, in_range(gk, k_end)) : vec4(0.0);
        }
    }
}

#ifndef GEMM_FAST
// Flushes v's denormals; true when a lane is nonzero and below 2^-63 in magnitude.
bool stage_strict(inout vec4 v) {
    bool tiny = false;
    [[unroll]] for (uint e = 0u; e < 4u; e++) {
        uint ex = floatBitsToUint(v[e]) & 0x7f800000u;
        v[e] = strict_ftz(v[e]);
        tiny = tiny || (ex != 0u && ex < (64u << 23));
    }
    return tiny;
}
#endif

// Registers -> shared buffer `buf` (chunk number `chunk`).
void store_chunk(uint buf, uint chunk) {
    uint t = gl_LocalInvocationID.x;
    bool tiny = false;
    [[unroll]] for (uint l = 0u; l < LA; l++) {
        vec4 v = ra[l];
#ifndef GEMM_FAST
        tiny = stage_strict(v) || tiny;
#endif
        uint idx = l * WG + t;
        if (!ta) {
            uint r = idx / (BK / 4u), kq = idx % (BK / 4u);
            [[unroll]] for (uint e = 0u; e < 4u; e++) {
                As[(buf * BK + kq * 4u + e) * SA + r / 4u][r % 4u] = v[e];
            }
        } else {
            uint kk = idx / (BM / 4u), rq = idx % (BM / 4u);
            As[(buf * BK + kk) * SA + rq] = v;
        }
    }
    [[unroll]] for (uint l = 0u; l < LB; l++) {
        vec4 v = rb[l];
#ifndef GEMM_FAST
        tiny = stage_strict(v) || tiny;
#endif
        uint idx = l * WG + t;
        if (!tb) {
            uint kk = idx / (BN / 4u), cq = idx % (BN / 4u);
            Bs[(buf * BK + kk) * SB + cq] = v;
        } else {
            uint c = idx / (BK / 4u), kq = idx % (BK / 4u);
            [[unroll]] for (uint e = 0u; e < 4u; e++) {
                Bs[(buf * BK + kq * 4u + e) * SB + c / 4u][c % 4u] = v[e];
            }
        }
    }
    if (tiny) {
        atomicMax(tiny_chunk[buf], chunk + 1u);
    }
}

// One step of k (kk of the chunk in shared buffer `buf`) for all the thread's outputs, written
// out in main (a macro, not a function): the accumulators stay a local array indexed only by
// unrolled constants, which the compiler keeps in registers (as a global array of 32 or more it
// kept them in local memory on NVIDIA, at a tenth of the speed).
#ifdef GEMM_FAST
#define GEMM_MAC(i, x, y, careful) acc[i] = fma(x, y, acc[i])
#else
#define GEMM_MAC(i, x, y, careful)                                        \
    {                                                                     \
        precise float prod = (careful) ? strict_mul(x, y) : (x) * (y);     \
        precise float s = acc[i] + prod;                                  \
        acc[i] = HW_FTZ ? s : strict_ftz(s);                              \
    }
#endif
#define GEMM_STEP(buf, kk, careful)                                                         \
    {                                                                                       \
        vec4 av[RM], bv[RN];                                                                \
        [[unroll]] for (uint q = 0u; q < RM; q++) {                                         \
            av[q] = As[((buf) * BK + (kk)) * SA + q * NTM + ty];                            \
        }                                                                                   \
        [[unroll]] for (uint qn = 0u; qn < RN; qn++) {                                      \
            bv[qn] = Bs[((buf) * BK + (kk)) * SB + qn * NTN + tx];                          \
        }                                                                                   \
        [[unroll]] for (uint q = 0u; q < RM; q++) {                                         \
            [[unroll]] for (uint e = 0u; e < 4u; e++) {                                     \
                [[unroll]] for (uint qn = 0u; qn < RN; qn++) {                              \
                    [[unroll]] for (uint f = 0u; f < 4u; f++) {                             \
                        GEMM_MAC((q * 4u + e) * TN + qn * 4u + f, av[q][e], bv[qn][f], careful); \
                    }                                                                       \
                }                                                                           \
            }                                                                               \
        }                                                                                   \
    }

// Finishes and writes four consecutive outputs of row r from column c (the part in range).
void store_out(vec4 v, uint r, uint c, bool last, bool has_bias, uint act, uint coff, uint yoff,
               bool y_vec) {
    if (last) {
        [[unroll]] for (uint f = 0u; f < 4u; f++) {
            float x = strict_canon(v[f]);
            if (has_bias && c + f < N) {
                x = strict_add(x, bias[coff + r * p.bias_sm + (c + f) * p.bias_sn]);
            }
            v[f] = activate(act, x);
        }
    }
    if (y_vec && c + 4u <= N) {
        y4[(yoff + r * N + c) / 4u] = v;
    } else {
        [[unroll]] for (uint f = 0u; f < 4u; f++) {
            if (c + f < N) y[yoff + r * N + c + f] = v[f];
        }
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
    // vec4 loads need the contiguous dimension (and so every batch offset) in whole vec4s.
    a_vec = ((ta ? M : K) % 4u) == 0u && (aoff % 4u) == 0u;
    b_vec = ((tb ? K : N) % 4u) == 0u && (boff % 4u) == 0u;
    uint yoff = bz * M * N;
    k_end = (K - p.k_begin) > GEMM_K_SPAN ? p.k_begin + GEMM_K_SPAN : K;
    bool last = k_end == K;
    uint t = gl_LocalInvocationID.x;
    tx = t % NTN;
    ty = t / NTN;
    bool y_vec = (N % 4u) == 0u;

    if (t < 2u) {
        tiny_chunk[t] = 0u;
    }
    float acc[TM * TN]; // acc[(q * 4 + e) * TN + qn * 4 + f]: row quad q lane e, column quad qn lane f
    [[unroll]] for (uint q = 0u; q < RM; q++) {
        [[unroll]] for (uint e = 0u; e < 4u; e++) {
            uint r = row0 + q * 4u * NTM + ty * 4u + e;
            [[unroll]] for (uint qn = 0u; qn < RN; qn++) {
                [[unroll]] for (uint f = 0u; f < 4u; f++) {
                    uint c = col0 + qn * 4u * NTN + tx * 4u + f;
                    acc[(q * 4u + e) * TN + qn * 4u + f] =
                        (p.k_begin != 0u && r < M && c < N) ? y[yoff + r * N + c] : 0.0;
                }
            }
        }
    }
    memoryBarrierShared();
    barrier();

    if (p.k_begin < k_end) {
        load_chunk(p.k_begin);
        store_chunk(0u, 0u);
    }
    memoryBarrierShared();
    barrier();
    uint chunk = 0u;
    for (uint k0 = p.k_begin; k0 < k_end; k0 += BK) {
        uint buf = chunk & 1u;
        bool more = k0 + BK < k_end;
        if (more) {
            load_chunk(k0 + BK);
        }
        uint kc = min(BK, k_end - k0);
#ifdef GEMM_FAST
        const bool careful = false;
#else
        bool careful = tiny_chunk[buf] == chunk + 1u;
#endif
        if (kc == BK && !careful) {
            [[unroll]] for (uint kk = 0u; kk < BK; kk++) {
                GEMM_STEP(buf, kk, false);
            }
        } else {
            for (uint kk = 0u; kk < kc; kk++) {
                GEMM_STEP(buf, kk, careful);
            }
        }
        if (more) {
            store_chunk(buf ^ 1u, chunk + 1u);
        }
        memoryBarrierShared();
        barrier();
        chunk++;
    }

    [[unroll]] for (uint q = 0u; q < RM; q++) {
        [[unroll]] for (uint e = 0u; e < 4u; e++) {
            uint r = row0 + q * 4u * NTM + ty * 4u + e;
            [[unroll]] for (uint qn = 0u; qn < RN; qn++) {
                uint c = col0 + qn * 4u * NTN + tx * 4u;
                uint i = (q * 4u + e) * TN + qn * 4u;
                vec4 v = vec4(acc[i], acc[i + 1u], acc[i + 2u], acc[i + 3u]);
                // `if`, not `continue`: spirv-opt's unroller leaves a loop with a `continue`
                // rolled, and a rolled loop indexes acc at run time, which sends it to local
                // memory.
                if (r < M) {
                    store_out(v, r, c, last, has_bias, act, coff, yoff, y_vec);
                }
            }
        }
    }
}

#endif // ADEADVM_GEMM_GLSL
