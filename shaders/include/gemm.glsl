// gemm.glsl -- the register-tiled MATMUL kernels (shaders/gemm_{strict,fast}_*.comp) for
// act none and relu (ops::rows::matmul_with runs GELU over their output).
//
// Geometry (compiled in, one shader per ops::rows::GemmTile, shaders/gemm_{strict,fast}_*.comp): a workgroup of
// WG = (BM/TM)*(BN/TN) threads computes a BM x BN output tile; each thread owns TM x TN outputs
// as RM = TM/4 row quads and RN = TN/4 column quads spread over the tile (rows
// q*4*(BM/TM) + ty*4 + e), so shared-memory reads are vec4 and conflict-free. k is staged BK at a
// time through two shared buffers: while a thread multiplies chunk j it already holds chunk j+1's
// global loads in registers (vec4 loads when the contiguous dimension is a multiple of 4), so
// one barrier per chunk suffices. A geometry whose two buffers would not fit in 48 KiB has one
// (GEMM_STAGES) and a second barrier a chunk, before the next chunk is stored.
//
// Arithmetic: every output keeps one accumulator that sees k ascending from +0 (resumed from y
// when k_begin > 0: one dispatch covers GEMM_K_SPAN of k, and the next resumes from the partial
// sums it stored: an f32 store and load keep their bits), exactly
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
#include "matmul_common.glsl"


// The geometry is compiled in (GEMM_BM, GEMM_BN, GEMM_BK, GEMM_TM, GEMM_TN, defined by each
// shaders/gemm_*.comp), and every per-thread array (the accumulators, the staged loads) is
// indexed only by constants written out by the macros below, never by a loop counter: NVIDIA's
// compiler left such loops rolled and moved the arrays to local memory (measured on an H100:
// 2.0 TFLOP/s against 20-34 with constant indices). The macros rather than spirv-opt's
// unroller, because the unroller drops `precise` on the copies it makes (and -O then fused the
// strict tier's products into FMAs).
#define GEMM_WG ((GEMM_BM / GEMM_TM) * (GEMM_BN / GEMM_TN))
#define GEMM_LA ((GEMM_BM * GEMM_BK) / (4 * GEMM_WG)) // vec4 loads of a per thread per chunk
#define GEMM_LB ((GEMM_BN * GEMM_BK) / (4 * GEMM_WG))
#if (GEMM_TM != 4 && GEMM_TM != 8) || (GEMM_TN != 4 && GEMM_TN != 8)
#error "GEMM_TM and GEMM_TN must be 4 or 8"
#endif
#if (GEMM_BN / GEMM_TN) % 8 != 0 || (GEMM_BM / GEMM_TM) % 4 != 0
#error "the thread grid is tiled by groups of 8 x 4 threads"
#endif
#if (GEMM_LA != 1 && GEMM_LA != 2) || (GEMM_LB != 1 && GEMM_LB != 2) || (GEMM_BK != 8 && GEMM_BK != 16 && GEMM_BK != 32)
#error "each thread stages one or two vec4s of each operand per chunk; GEMM_BK is 8, 16 or 32"
#endif
const uint BM = GEMM_BM;
const uint BN = GEMM_BN;
const uint BK = GEMM_BK;
const uint TM = GEMM_TM;
const uint TN = GEMM_TN;
const uint WG = GEMM_WG;
layout(constant_id = 0) const bool HW_FTZ = false;
// Set by ops::rows where M, N and K are whole multiples of BM, BN and BK and both operands'
// contiguous dimensions and batch strides are multiples of 4: then no load needs a bounds check
// (a branch the driver removes when it builds the pipeline; measured on an H100 with 128x128
// tiles: 34.8 -> 37.0 TFLOP/s at 4096^2; checking at run time per tile gained nothing).
layout(constant_id = 1) const bool ALIGNED = false;
// The k one dispatch covers (ops::rows::gemm_k_span): lavapipe ends a loop after 65535
// iterations of an invocation in all, and the k loops here run a few iterations per k there;
// elsewhere one dispatch takes the whole k (no second pass through y).
layout(constant_id = 2) const uint GEMM_K_SPAN = 2048u;
layout(local_size_x = GEMM_WG) in;

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

// Two shared buffers of each operand where both fit in 48 KiB (NVIDIA's workgroup limit), else
// one (ops::rows::GemmTile::stages states the same rule): with one, a chunk's staged loads wait
// for every thread to finish reading the previous chunk (a second barrier a chunk).
#if 2 * GEMM_BK * (GEMM_BM + GEMM_BN + 8) * 4 + 8 <= 49152
#define GEMM_STAGES 2
#else
#define GEMM_STAGES 1
#endif
shared vec4 As[GEMM_STAGES * BK * SA]; // As[(buf * BK + kk) * SA + r / 4][r % 4] = op(a)[row0 + r, k0 + kk]
shared vec4 Bs[GEMM_STAGES * BK * SB]; // Bs[(buf * BK + kk) * SB + c / 4][c % 4] = op(b)[k0 + kk, col0 + c]
shared uint tiny_chunk[2];    // 1 + the last chunk number staged in each buffer with a tiny operand

uint M, N, K, k_end, row0, col0, aoff, boff;
bool ta, tb, a_vec, b_vec;
vec4 ra0, ra1, rb0, rb1; // the next chunk, between its global load and its shared store
uint tx, ty;             // the thread's column and row within the tile's thread grid

// Four consecutive elements of a stored operand along its contiguous dimension: `base` is the
// first's index, `n_in` how many of the four are in range (the rest read as 0). One body for
// both operands (GLSL takes no buffer parameters, hence the macro).
#define GEMM_LOAD4(name, x, x4, vec_ok)                                  \
    vec4 name(uint base, uint n_in) {                                    \
        if (n_in >= 4u && vec_ok) {                                      \
            return x4[base / 4u];                                        \
        }                                                                \
        return vec4(n_in > 0u ? x[base] : 0.0, n_in > 1u ? x[base + 1u] : 0.0, \
                    n_in > 2u ? x[base + 2u] : 0.0, n_in > 3u ? x[base + 3u] : 0.0); \
    }
GEMM_LOAD4(load4_a, a, a4, a_vec)
GEMM_LOAD4(load4_b, b, b4, b_vec)

uint in_range(uint first, uint end) { return first >= end ? 0u : min(end - first, 4u); }

// Global -> registers: load `l` (0 or 1) of this thread for the chunk starting at k0, of an
// operand whose other dimension has X elements from x0 on and BX in the tile. Stored with k
// contiguous (a as [M, K] without ta, b as [N, K] with tb) it is read along k, else (stored
// [K, X]) along its other dimension. Under ALIGNED every chunk lies wholly inside both
// operands, read as vec4s, so the load needs no bounds checks (the same values). One body for
// both operands (hence the macro).
#define GEMM_LOAD_OPERAND(name, load4, x4, k_contiguous, BX, x0, X, xoff)               \
    vec4 name(uint l, uint k0) {                                                          \
        uint idx = l * WG + gl_LocalInvocationID.x;                                       \
        if (k_contiguous) {                                                               \
            uint r = idx / (BK / 4u), kq = idx % (BK / 4u);                               \
            uint gr = x0 + r, gk = k0 + kq * 4u;                                          \
            if (ALIGNED) return x4[(xoff + gr * K + gk) / 4u];                            \
            return gr < X ? load4(xoff + gr * K + gk, in_range(gk, k_end)) : vec4(0.0);   \
        }                                                                                 \
        uint kk = idx / (BX / 4u), rq = idx % (BX / 4u);                                  \
        uint gk = k0 + kk, gr = x0 + rq * 4u;                                             \
        if (ALIGNED) return x4[(xoff + gk * X + gr) / 4u];                                \
        return gk < k_end ? load4(xoff + gk * X + gr, in_range(gr, X)) : vec4(0.0);       \
    }
GEMM_LOAD_OPERAND(load_a, load4_a, a4, !ta, BM, row0, M, aoff)
GEMM_LOAD_OPERAND(load_b, load4_b, b4, tb, BN, col0, N, boff)
void load_chunk(uint k0) {
    ra0 = load_a(0u, k0);
    rb0 = load_b(0u, k0);
#if GEMM_LA == 2
    ra1 = load_a(1u, k0);
#endif
#if GEMM_LB == 2
    rb1 = load_b(1u, k0);
#endif
}

#ifdef GEMM_FAST
bool stage_strict(inout vec4 v) { return false; }
#else
vec4 strict_ftz4(vec4 v) {
    return vec4(strict_ftz(v.x), strict_ftz(v.y), strict_ftz(v.z), strict_ftz(v.w));
}
// Flushes v's denormals; true when a lane is nonzero and below 2^-63 in magnitude.
bool stage_strict(inout vec4 v) {
    uvec4 ex = floatBitsToUint(v) & 0x7f800000u;
    v = strict_ftz4(v);
    uvec4 tiny = uvec4(notEqual(ex, uvec4(0u))) & uvec4(lessThan(ex, uvec4(64u << 23)));
    return any(notEqual(tiny, uvec4(0u)));
}
#endif

// Registers -> shared buffer `buf` of S (row pitch SX vec4s, BX elements of the tile's other
// dimension): load `l` (v) of an operand read as GEMM_LOAD_OPERAND says; true when it has a
// tiny operand. Either way S holds k rows of the other dimension's elements.
#define GEMM_STORE_OPERAND(name, S, k_contiguous, BX, SX)                                 \
    bool name(uint l, vec4 v, uint buf) {                                                 \
        bool tiny = stage_strict(v);                                                      \
        uint idx = l * WG + gl_LocalInvocationID.x;                                       \
        if (k_contiguous) {                                                               \
            uint r = idx / (BK / 4u), kq = idx % (BK / 4u);                               \
            uint base = (buf * BK + kq * 4u) * SX + r / 4u, lane = r % 4u;                \
            S[base][lane] = v.x;                                                          \
            S[base + SX][lane] = v.y;                                                     \
            S[base + 2u * SX][lane] = v.z;                                                \
            S[base + 3u * SX][lane] = v.w;                                                \
        } else {                                                                          \
            uint kk = idx / (BX / 4u), rq = idx % (BX / 4u);                              \
            S[(buf * BK + kk) * SX + rq] = v;                                             \
        }                                                                                 \
        return tiny;                                                                      \
    }
GEMM_STORE_OPERAND(store_a, As, !ta, BM, SA)
GEMM_STORE_OPERAND(store_b, Bs, tb, BN, SB)
// The staged loads into shared buffer `buf` (chunk number `chunk`).
void store_chunk(uint buf, uint chunk) {
    bool tiny = store_a(0u, ra0, buf);
    tiny = store_b(0u, rb0, buf) || tiny;
#if GEMM_LA == 2
    tiny = store_a(1u, ra1, buf) || tiny;
#endif
#if GEMM_LB == 2
    tiny = store_b(1u, rb1, buf) || tiny;
#endif
    if (tiny) {
        atomicMax(tiny_chunk[buf], chunk + 1u);
    }
}

// The accumulators: acc[(q * 4 + e) * RN + qn] holds row quad q lane e, column quad qn (four
// columns). GEMM_FOR_ACC(X) writes X(i, q, e, qn) out for every accumulator, with literals.
#define GEMM_FOR_E(X, q, qn)                                                               \
    X(((q) * 4 + 0) * (GEMM_TN / 4) + (qn), q, 0, qn) X(((q) * 4 + 1) * (GEMM_TN / 4) + (qn), q, 1, qn) \
    X(((q) * 4 + 2) * (GEMM_TN / 4) + (qn), q, 2, qn) X(((q) * 4 + 3) * (GEMM_TN / 4) + (qn), q, 3, qn)
#if GEMM_TN == 8
#define GEMM_FOR_QN(X, q) GEMM_FOR_E(X, q, 0) GEMM_FOR_E(X, q, 1)
#else
#define GEMM_FOR_QN(X, q) GEMM_FOR_E(X, q, 0)
#endif
#if GEMM_TM == 8
#define GEMM_FOR_ACC(X) GEMM_FOR_QN(X, 0) GEMM_FOR_QN(X, 1)
#else
#define GEMM_FOR_ACC(X) GEMM_FOR_QN(X, 0)
#endif

// One multiply-accumulate of a row quad's lane (scalar x) into four columns (vec4 y), lane by
// lane exactly the scalar rule (vector arithmetic is per lane).
#ifdef GEMM_FAST
#define GEMM_MAC(i, x, y, careful) acc[i] = fma(vec4(x), y, acc[i]);
#else
vec4 strict_mul4(float x, vec4 y) {
    return vec4(strict_mul(x, y.x), strict_mul(x, y.y), strict_mul(x, y.z), strict_mul(x, y.w));
}
#define GEMM_MAC(i, x, y, careful)                                         \
    {                                                                      \
        precise vec4 prod = careful ? strict_mul4(x, y) : vec4(x) * (y);   \
        precise vec4 s = acc[i] + prod;                                    \
        acc[i] = HW_FTZ ? s : strict_ftz4(s);                              \
    }
#endif
#define GEMM_MAC_PLAIN(i, q, e, qn) GEMM_MAC(i, av[q][e], bv[qn], false)
#define GEMM_MAC_CAREFUL(i, q, e, qn) GEMM_MAC(i, av[q][e], bv[qn], careful)

// One step of k (kk of the chunk in shared buffer `buf`) for all the thread's outputs, each
// multiply-accumulate written by MAC (GEMM_MAC_PLAIN, or GEMM_MAC_CAREFUL with a bool
// `careful` in scope: whether to take strict_mul).
#define GEMM_STEP(buf, kk, MAC)                                                                \
    {                                                                                       \
        vec4 av[RM], bv[RN];                                                                \
        av[0] = As[((buf) * BK + (kk)) * SA + ty];                                          \
        bv[0] = Bs[((buf) * BK + (kk)) * SB + tx];                                          \
        if (RM == 2u) av[RM - 1u] = As[((buf) * BK + (kk)) * SA + NTM + ty];                \
        if (RN == 2u) bv[RN - 1u] = Bs[((buf) * BK + (kk)) * SB + NTN + tx];                \
        GEMM_FOR_ACC(MAC)                                                                   \
    }
#define GEMM_STEPS4(buf, k0)                                                            \
    GEMM_STEP(buf, k0, GEMM_MAC_PLAIN) GEMM_STEP(buf, k0 + 1u, GEMM_MAC_PLAIN)          \
    GEMM_STEP(buf, k0 + 2u, GEMM_MAC_PLAIN) GEMM_STEP(buf, k0 + 3u, GEMM_MAC_PLAIN)
#define GEMM_STEPS8(buf, k0) GEMM_STEPS4(buf, k0) GEMM_STEPS4(buf, k0 + 4u)
#if GEMM_BK == 8
#define GEMM_CHUNK(buf) GEMM_STEPS8(buf, 0u)
#elif GEMM_BK == 16
#define GEMM_CHUNK(buf) GEMM_STEPS8(buf, 0u) GEMM_STEPS8(buf, 8u)
#else
#define GEMM_CHUNK(buf) GEMM_STEPS8(buf, 0u) GEMM_STEPS8(buf, 8u) GEMM_STEPS8(buf, 16u) GEMM_STEPS8(buf, 24u)
#endif

// The four outputs of accumulator (q, e, qn): row, first column.
uint acc_row(uint q, uint e) { return row0 + q * 4u * NTM + ty * 4u + e; }
uint acc_col(uint qn) { return col0 + qn * 4u * NTN + tx * 4u; }

// The partial sums an earlier dispatch stored (k_begin > 0), else +0.
vec4 resume(uint q, uint e, uint qn, uint yoff) {
    uint r = acc_row(q, e), c = acc_col(qn);
    if (p.k_begin == 0u || r >= M) {
        return vec4(0.0);
    }
    uint i = yoff + r * N + c;
    return vec4(c < N ? y[i] : 0.0, c + 1u < N ? y[i + 1u] : 0.0, c + 2u < N ? y[i + 2u] : 0.0,
                c + 3u < N ? y[i + 3u] : 0.0);
}
#define GEMM_RESUME(i, q, e, qn) acc[i] = resume(q, e, qn, yoff);

// The last span's finish of output (r, c): canonical NaN, the bias, the activation.
float finish(float x, uint r, uint c, bool has_bias, uint act, uint coff) {
    x = strict_canon(x);
    if (has_bias && c < N) {
        x = strict_add(x, bias[coff + r * p.bias_sm + c * p.bias_sn]);
    }
    return activate(act, x);
}

// Finishes and writes four consecutive outputs of row r from column c (the part in range).
void store_out(vec4 v, uint r, uint c, bool last, bool has_bias, uint act, uint coff, uint yoff,
               bool y_vec) {
    if (r >= M) {
        return;
    }
    if (last) {
        v = vec4(finish(v.x, r, c, has_bias, act, coff), finish(v.y, r, c + 1u, has_bias, act, coff),
                 finish(v.z, r, c + 2u, has_bias, act, coff), finish(v.w, r, c + 3u, has_bias, act, coff));
    }
    if (y_vec && c + 4u <= N) {
        y4[(yoff + r * N + c) / 4u] = v;
    } else {
        if (c < N) y[yoff + r * N + c] = v.x;
        if (c + 1u < N) y[yoff + r * N + c + 1u] = v.y;
        if (c + 2u < N) y[yoff + r * N + c + 2u] = v.z;
        if (c + 3u < N) y[yoff + r * N + c + 3u] = v.w;
    }
}
#define GEMM_STORE(i, q, e, qn) \
    store_out(acc[i], acc_row(q, e), acc_col(qn), last, has_bias, act, coff, yoff, y_vec);

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
    // Each group of 32 threads (an NVIDIA warp) covers 8 thread columns by 4 thread rows, so one
    // step's shared-memory reads touch 4 vec4s of a and 8 of b (a row of 16 threads read 16 of
    // b, twice the bandwidth). Any permutation of threads gives the same bits.
    tx = (t / 32u) % (NTN / 8u) * 8u + t % 8u;
    ty = (t / 32u) / (NTN / 8u) * 4u + (t % 32u) / 8u;
    bool y_vec = (N % 4u) == 0u;

    if (t < 2u) {
        tiny_chunk[t] = 0u;
    }
    vec4 acc[RM * 4u * RN];
    GEMM_FOR_ACC(GEMM_RESUME)
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
#if GEMM_STAGES == 2
        uint buf = chunk & 1u;
#else
        uint buf = 0u;
#endif
        bool more = k0 + BK < k_end;
        if (more) {
            load_chunk(k0 + BK);
        }
        uint kc = min(BK, k_end - k0);
#ifdef GEMM_FAST
        bool careful = false;
#else
        bool careful = tiny_chunk[buf] == chunk + 1u;
#endif
        if (kc == BK && !careful) {
            // Written out: every kk a literal, so shared-memory offsets are constants too.
            GEMM_CHUNK(buf)
        } else {
            for (uint kk = 0u; kk < kc; kk++) {
                GEMM_STEP(buf, kk, GEMM_MAC_CAREFUL)
            }
        }
#if GEMM_STAGES == 2
        if (more) {
            store_chunk(buf ^ 1u, chunk + 1u);
        }
#else
        memoryBarrierShared();
        barrier(); // every thread is done reading the one buffer
        if (more) {
            store_chunk(0u, chunk + 1u);
        }
#endif
        memoryBarrierShared();
        barrier();
        chunk++;
    }

    GEMM_FOR_ACC(GEMM_STORE)
}

#endif // ADEADVM_GEMM_GLSL
