// strictrow.glsl -- the strict tier's one-pass row kernels (softmax_strict, layernorm_strict,
// rmsnorm_strict): fastrow.glsl's shape with rowtree.glsl's bits. A row is held in the registers of its
// STRICT_T threads (1 to 256; 256 / STRICT_T rows a workgroup of 256), STRICT_PER elements each
// (4 to 64; 4 where STRICT_T < 64): thread t of a row holds elements e = t + STRICT_T * j
// (j < STRICT_PER), so the row is read once and written once, where rowtree's kernels read it
// once a pass (rows of up to 16384 elements; ops::rows::RowOp::one_pass_kernel picks these
// for those rows on devices with subgroup shuffles in compute shaders).
//
// The bits are numerics::reduce's 256-lane tree (rowtree.glsl has the rules): thread t holds
// lanes t + STRICT_T * q (q < R = 256 / STRICT_T), element j falling to lane q = j % R, and
// folds each lane's elements in ascending order from the lane's starting value, as the lane
// does; it combines its R lanes in registers by the tree's levels 128 .. STRICT_T (the pairs
// the halving makes). With fewer than 64 threads a row (R > 4; rows of up to 4 * STRICT_T
// elements) element j is lane j's only element and lanes 4 .. R - 1 hold the starting value,
// which levels R/2 .. 4 fold into lanes 0 .. 3 without changing them (strict_row_reduce). The
// levels below pair thread j with thread j + s (left operand first); with fewer than 64 threads a
// row, placed by subgroup as fastrow.glsl places them, a row within one subgroup runs them all
// by shuffles in place (no barrier); otherwise those with s >= gl_SubgroupSize run in shared
// memory (a barrier each), the rest within one subgroup a row by shuffles, whose invocation i
// reads the row's thread i: the same pairs, so the same bits on any subgroup size (8 or 16 on
// lavapipe, 32 on NVIDIA).
//
// Registers cannot be indexed at run time (NVIDIA's compiler moves an array indexed by a loop
// counter to local memory), and a strict shader may not mark a loop [[unroll]] (the unroller
// drops `precise`). Nor are the strict steps written out for every element: the strict
// operations are long, and written out 16 times (a 388 KB binary) they ran slower than these
// loops on an H200 (softmax over rows of 4096: 633 against 877 GB/s). So the row is loaded by
// SROW_EACH_HALF (a literal index per element: short), and each pass is a loop,
// STRICT_ROW_LOOP, kept rolled, four elements an iteration: it works on v[0..3], then rotates
// the thread's elements down by four, so after the loop every element is back in place with
// its new value (with 64 elements, a loop over each half: v, then w).
#ifndef ADEADVM_STRICTROW_GLSL
#define ADEADVM_STRICTROW_GLSL
// The including shader enables GL_KHR_shader_subgroup_basic and _shuffle.
#extension GL_EXT_control_flow_attributes : require
#include "treeops.glsl"

layout(local_size_x = 256) in;
// STRICT_T (threads a row) and STRICT_PER (elements a thread: 4, 8, 16, 32 or 64, no suffix, since the
// preprocessor tests it) are defined by shaders/{softmax,layernorm,rmsnorm}_strict_<T>x<PER>.comp.
const uint SROW_T = STRICT_T;
const uint SROW_R = TREE_LANES / STRICT_T; // lanes a thread; also rows a workgroup
const uint SROW_HELD = min(SROW_R, 4u); // lane accumulators a thread keeps (the rest: R > 4)
#define SROW_EACH4(X, b) X((b)) X((b) + 1u) X((b) + 2u) X((b) + 3u)
#define SROW_EACH8(X, b) SROW_EACH4(X, b) SROW_EACH4(X, (b) + 4u)
#define SROW_EACH16(X, b) SROW_EACH8(X, b) SROW_EACH8(X, (b) + 8u)
#define SROW_EACH32(X, b) SROW_EACH16(X, b) SROW_EACH16(X, (b) + 16u)
// The thread's elements: `float v[SROW_HALF]` (elements j < SROW_HALF), and for 64 elements a
// second array, `float w[32]` (element 32 + j in w[j]), each with a loop of its own: a loop
// rotates its whole array each iteration, so one array of 64 would cost twice the moves per
// element that one of 32 does (H100, over rows of 16384, one array of 64 against two of 32:
// strict SOFTMAX 1096 -> 1388 GB/s, LAYERNORM 1273 -> 2026, RMSNORM 1872 -> 2551).
// SROW_EACH_HALF(X): X(j) for every j < SROW_HALF, written out.
#if STRICT_PER == 64
#define SROW_EACH_HALF(X) SROW_EACH32(X, 0u)
const uint SROW_HALF = 32u;
#define SROW_DECLARE_AND_LOAD float v[32]; float w[32]; SROW_EACH_HALF(SROW_LOAD) SROW_EACH_HALF(SROW_LOAD_W)
#else
#if STRICT_PER == 4
#define SROW_EACH_HALF(X) SROW_EACH4(X, 0u)
#elif STRICT_PER == 8
#define SROW_EACH_HALF(X) SROW_EACH8(X, 0u)
#elif STRICT_PER == 16
#define SROW_EACH_HALF(X) SROW_EACH16(X, 0u)
#elif STRICT_PER == 32
#define SROW_EACH_HALF(X) SROW_EACH32(X, 0u)
#else
#error "STRICT_PER is 4, 8, 16, 32 or 64"
#endif
const uint SROW_HALF = STRICT_PER;
#define SROW_DECLARE_AND_LOAD float v[STRICT_PER]; SROW_EACH_HALF(SROW_LOAD)
#endif
#if STRICT_T != 1 && STRICT_T != 2 && STRICT_T != 4 && STRICT_T != 8 && STRICT_T != 16 && STRICT_T != 32 && \
    STRICT_T != 64 && STRICT_T != 128 && STRICT_T != 256
#error "STRICT_T is a power of two from 1 to 256"
#endif
#if STRICT_T < 64 && STRICT_PER != 4
#error "fewer than 64 threads a row hold 4 elements each"
#endif

// STRICT_ROW_BEGIN: the kernels' common start (their input buffer is `x`, their push constants
// have `rows` and `n`): a workgroup without rows returns (uniformly, before any barrier); then
// `row`, `live` (row < p.rows), `t` (srow_thread()), `n` (0 for a padding row), `base` (the
// row's first element) and the thread's elements `v`, every load issued at once before any
// arithmetic: a load inside the strict arithmetic's branches waits for the steps before it. A
// thread past the row's end reads the row's last element, unused, rather than
// branch.
#define SROW_LOAD_AT(j) (live ? x[base + min(t + SROW_T * (j), n - 1u)] : 0.0)
#define SROW_LOAD(j) v[j] = SROW_LOAD_AT(j);
#define SROW_LOAD_W(j) w[j] = SROW_LOAD_AT((j) + SROW_HALF);
#define STRICT_ROW_BEGIN                                                                   \
    if (!srow_group_live(p.rows)) {                                                         \
        return;                                                                             \
    }                                                                                       \
    uint row = srow_row();                                                                  \
    bool live = row < p.rows;                                                               \
    uint t = srow_thread(), n = live ? p.n : 0u, base = row * p.n;                          \
    SROW_DECLARE_AND_LOAD

// STRICT_ROW_LOOP(QUAD, BODY): for each quad of the thread's elements in order, QUAD (a
// statement on the quad, `c[0..3]`, as a whole; SROW_NO_QUAD for none: its variables are in
// scope for BODY), then BODY(0u) .. BODY(3u) on `c[i]` (element number srow_elem(i) of the row,
// lane srow_lane(i) of the thread; the body tests the element against the row's end) with the
// new values kept, then, each SROW_STEP elements, the rotation (SROW_SHIFT). The thread's elements are v (and w),
// declared by STRICT_ROW_BEGIN. An element past the row's end holds a copy of
// the row's last (STRICT_ROW_BEGIN), so QUAD may compute on it: its result is never used.
//
// SROW_STEP, the elements an iteration takes (4, 8 or 16; no suffix, since the preprocessor
// tests it): each iteration rotates the whole array, so larger steps cost fewer moves an element
// but a longer body. 8 unless the including shader chose (from rows of 512, where a thread holds
// 8 elements or more), measured on an H100 against 4 over 16M elements or more, GB/s: strict
// SOFTMAX over rows of 512 1633 -> 1745, 1024 1643 -> 1725, 4096 1610 -> 1708, 8192 1507 -> 1793
// (16: 1912), 16384 1388 -> 1548 (16: 1584); LAYERNORM over rows of 4096 1949 -> 1982, 16384
// 2043 -> 2268; RMSNORM over rows of 16384 2561 -> 2775, but rows of 512 2533 -> 2433 and 1024
// 2648 -> 2615, and LAYERNORM over 4096 rows of 1024 1414 -> 1252 (the kernels choose 4 there).
#ifndef SROW_STEP
#if STRICT_PER >= 8
#define SROW_STEP 8
#else
#define SROW_STEP 4
#endif
#endif
#if SROW_STEP != 4 && SROW_STEP != 8 && SROW_STEP != 16
#error "SROW_STEP is 4, 8 or 16"
#endif
#if SROW_STEP > 4
// SROW_STEP / 4 quads an iteration, each (k) in its own scope, their results kept in cs.
#define SROW_SUB(X, k, QUAD, BODY)                                                         \
    {                                                                                       \
        uint srow_q = srow_p * (SROW_STEP / 4u) + (k);                                      \
        float c[4] = float[4](X[4u * (k)], X[4u * (k) + 1u], X[4u * (k) + 2u], X[4u * (k) + 3u]); \
        QUAD                                                                                \
        BODY(0u) BODY(1u) BODY(2u) BODY(3u)                                                 \
        cs[4u * (k)] = c[0]; cs[4u * (k) + 1u] = c[1]; cs[4u * (k) + 2u] = c[2]; cs[4u * (k) + 3u] = c[3]; \
    }
#if SROW_STEP == 8
#define SROW_SUBS(X, QUAD, BODY) SROW_SUB(X, 0u, QUAD, BODY) SROW_SUB(X, 1u, QUAD, BODY)
#else
#define SROW_SUBS(X, QUAD, BODY) SROW_SUB(X, 0u, QUAD, BODY) SROW_SUB(X, 1u, QUAD, BODY) \
    SROW_SUB(X, 2u, QUAD, BODY) SROW_SUB(X, 3u, QUAD, BODY)
#endif
#define SROW_KEPT cs
// One loop over the quads q0 .. q0 + SROW_HALF / 4 - 1, held in array X (v or w) and rotated by
// SHIFT, SROW_STEP elements an iteration.
#define SROW_LOOP_OVER(X, SHIFT, q0, QUAD, BODY)                                            \
    [[dont_unroll]] for (uint srow_p = (q0) / (SROW_STEP / 4u); srow_p < ((q0) + SROW_HALF / 4u) / (SROW_STEP / 4u); srow_p++) { \
        float cs[SROW_STEP];                                                                \
        SROW_SUBS(X, QUAD, BODY)                                                            \
        SROW_EACH_HALF(SHIFT)                                                               \
    }
#else
#define SROW_KEPT c
#define SROW_LOOP_OVER(X, SHIFT, q0, QUAD, BODY)                                            \
    [[dont_unroll]] for (uint srow_q = (q0); srow_q < (q0) + SROW_HALF / 4u; srow_q++) {   \
        float c[4] = float[4](X[0], X[1], X[2], X[3]);                                      \
        QUAD                                                                                \
        BODY(0u) BODY(1u) BODY(2u) BODY(3u)                                                 \
        SROW_EACH_HALF(SHIFT)                                                               \
    }
#endif
// The rotation by SROW_STEP: element j takes element j + SROW_STEP's value, the last SROW_STEP
// the iteration's new values (SROW_KEPT: c, or cs for several quads).
#define SROW_ROTATE(X, j) X[j] = (j) + SROW_STEP < SROW_HALF ? X[min((j) + SROW_STEP, SROW_HALF - 1u)] : SROW_KEPT[(j) % SROW_STEP];
#define SROW_SHIFT(j) SROW_ROTATE(v, j)
#define SROW_SHIFT_W(j) SROW_ROTATE(w, j)
#if STRICT_PER == 64
#define STRICT_ROW_LOOP(QUAD, BODY)                                                        \
    SROW_LOOP_OVER(v, SROW_SHIFT, 0u, QUAD, BODY)                                           \
    SROW_LOOP_OVER(w, SROW_SHIFT_W, SROW_HALF / 4u, QUAD, BODY)
#else
#define STRICT_ROW_LOOP(QUAD, BODY) SROW_LOOP_OVER(v, SROW_SHIFT, 0u, QUAD, BODY)
#endif
#define SROW_NO_QUAD
// The quad as a vec4, and a vec4 put back into it.
#define SROW_C4 vec4(c[0], c[1], c[2], c[3])
// The quad's elements of a row-long buffer (gamma), an index past the row's end clamped to it.
#define SROW_LOAD4(buf) vec4(buf[min(srow_elem(0u), p.n - 1u)], buf[min(srow_elem(1u), p.n - 1u)], \
                             buf[min(srow_elem(2u), p.n - 1u)], buf[min(srow_elem(3u), p.n - 1u)])
#define SROW_SET_C4(q4) { vec4 srow_t4 = (q4); c[0] = srow_t4.x; c[1] = srow_t4.y; c[2] = srow_t4.z; c[3] = srow_t4.w; }
#define srow_elem(i) (srow_thread() + SROW_T * (srow_q * 4u + (i)))
// The thread's lane (of its 4 lane accumulators) element i of a quad falls to: with R <= 4, q % R
// for an element of lane q; with R > 4, the thread's element i (its only quad) is its lane i.
#define srow_lane(i) ((i) % SROW_HELD)

// The thread's place in the workgroup: with fewer than 64 threads a row, its subgroup's number
// times the subgroup size plus its place in the subgroup, so that a row is a run of invocations
// of one subgroup (or whole subgroups) however the device numbers them (fastrow.glsl's
// fast_place, with its assumption: full subgroups of a power-of-two size).
#if STRICT_T < 64
uint srow_place() { return gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID; }
#else
uint srow_place() { return gl_LocalInvocationIndex; }
#endif
// The thread's place in its row, and the row (may be >= the row count: a padding row of the
// last workgroup, whose threads still take part in the barriers).
uint srow_thread() { return srow_place() % SROW_T; }
uint srow_row() { return tree_group() * SROW_R + srow_place() / SROW_T; }
// Whether this workgroup has any row below `rows` (uniform: a workgroup without returns
// before any barrier).
bool srow_group_live(uint rows) { return tree_group() * SROW_R < rows; }

// A lane accumulator for each of the thread's lanes (SROW_R of them, 1 to 4), all starting at
// op's starting value; SROW_KEYS: the same for a max on strict_max_key's keys (-inf's key).
#define SROW_LANES(name, op) float name[4] = float[4](tree_init(op), tree_init(op), tree_init(op), tree_init(op));
#define SROW_KEYS(name)                                                                    \
    int name##_init = strict_max_key(S_F(0xff800000u));                                   \
    int name[4] = int[4](name##_init, name##_init, name##_init, name##_init);

// strict_row_reduce's op for the max of canonical values on strict_max_key's keys, beside
// treeops' ops on floats.
const uint SROW_MAX_KEY = 4u;
uint srow_op(uint op, uint a, uint b) {
    if (op == SROW_MAX_KEY) return uint(max(int(a), int(b)));
    return floatBitsToUint(tree_op(op, uintBitsToFloat(a), uintBitsToFloat(b)));
}

// The lanes' and results' bits (keys are not floats: moved as integers, never through float
// variables, which need not keep the bits of a denormal or NaN pattern).
shared uint srow_lanes[TREE_LANES];
// Each reduction of a kernel has its own result slots (`slot`, 0 or 1), so the next
// reduction's stores never meet a thread still reading the last result.
shared uint srow_result[2][SROW_R];

// The tree's result over the row's lanes, `lanes` holding this thread's bits (in lane order q);
// every thread of the row gets it. Called by every thread of the workgroup (it has barriers).
// Measured and not kept (H200, strict, GB/s, the same bits): one subgroup a row taking the
// shared-memory levels between subgroup barriers, two workgroup barriers a reduction instead
// of five at 256 threads a row: SOFTMAX over rows of 4096 1736 -> 1756, of 1024 1745 -> 1680,
// LAYERNORM over rows of 1024 1750 -> 1823, RMSNORM 2804 -> 2781.
uint strict_row_reduce(uint op, uint lanes[4], uint slot) {
    // Levels 128 .. SROW_T within the thread: lane q pairs with lane q + R/2 first.
    uint v = lanes[0];
    if (SROW_R == 2u) {
        v = srow_op(op, lanes[0], lanes[1]);
    } else if (SROW_R >= 4u) {
        // With R > 4, levels R/2 .. 4 first pair lanes 0 .. 3 with lanes that hold only the
        // starting value s (top). Each of lanes 0 .. 3 is s or op(s, x) for its one element x,
        // and op(op(s, x), s) == op(s, x) for every op here (the sum's first add has already
        // flushed x and turned -0 into +0; max is idempotent), so those levels change no bit
        // and are skipped: 24 strict operations a reduction at 1 thread a row.
        v = srow_op(op, srow_op(op, lanes[0], lanes[2]), srow_op(op, lanes[1], lanes[3]));
    }
    uint place = srow_place(), t = srow_thread();
#if STRICT_T < 64
    if (SROW_T <= gl_SubgroupSize) {
        // The row is SROW_T neighbouring invocations of one subgroup (srow_place): every
        // level by shuffles. Invocations t >= l compute values no level reads (their shuffle
        // index kept in range only so that the shuffle is defined).
        uint i = gl_SubgroupInvocationID;
        for (uint l = SROW_T / 2u; l > 0u; l >>= 1) {
            uint right = subgroupShuffle(v, min(i + l, gl_SubgroupSize - 1u));
            if (t < l) {
                v = srow_op(op, v, right);
            }
        }
        return subgroupShuffle(v, i - t);
    }
#endif
    srow_lanes[place] = v;
    memoryBarrierShared();
    barrier();
    uint s = SROW_T / 2u;
    for (; s >= gl_SubgroupSize; s >>= 1) {
        if (t < s) {
            srow_lanes[place] = srow_op(op, srow_lanes[place], srow_lanes[place + s]);
        }
        memoryBarrierShared();
        barrier();
    }
    // The row's threads 0 .. 2s - 1 now hold their values after level 2s (2s <= the subgroup
    // size); subgroup k finishes rows k, k + the subgroup count, ...
    uint i = gl_SubgroupInvocationID;
    for (uint row = gl_SubgroupID; row < SROW_R; row += gl_NumSubgroups) {
        uint w = srow_lanes[row * SROW_T + min(i, 2u * s - 1u)];
        for (uint l = s; l > 0u; l >>= 1) {
            // Invocations i >= l compute values no level reads (their shuffle index is kept
            // in range only so that the shuffle is defined).
            uint right = subgroupShuffle(w, min(i + l, gl_SubgroupSize - 1u));
            if (i < l) {
                w = srow_op(op, w, right);
            }
        }
        if (i == 0u) {
            srow_result[slot][row] = w;
        }
    }
    memoryBarrierShared();
    barrier();
    return srow_result[slot][place / SROW_T];
}

// The row's sum by tree op `op` (a sum) of the thread's lanes.
float strict_row_sum(uint op, float lanes[4], uint slot) {
    uint bits[4] = uint[4](floatBitsToUint(lanes[0]), floatBitsToUint(lanes[1]),
                           floatBitsToUint(lanes[2]), floatBitsToUint(lanes[3]));
    return uintBitsToFloat(strict_row_reduce(op, bits, slot));
}

// The row's strict max from the thread's lanes' keys (SROW_KEYS).
float strict_row_max(int keys[4], uint slot) {
    uint bits[4] = uint[4](uint(keys[0]), uint(keys[1]), uint(keys[2]), uint(keys[3]));
    return strict_key_value(int(strict_row_reduce(SROW_MAX_KEY, bits, slot)));
}

#endif // ADEADVM_STRICTROW_GLSL
