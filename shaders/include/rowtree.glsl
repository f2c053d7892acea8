// rowtree.glsl -- the fixed 256-lane reduction tree of numerics::reduce (`tree`, docs/numerics.md),
// with the rows of a 256-thread workgroup: the GLSL twin of `sum` / `max_reduce`.
//
// The tree every executor follows:
//     lane[j] = init                                   for j in 0..256
//     for i in 0..n ascending: lane[i % 256] = op(lane[i % 256], v(i))
//     for s in 128, 64, ..., 1: for j in 0..s: lane[j] = op(lane[j], lane[j + s])
//     result = lane[0]
// Writing value(j, s) for lane j once level s is done (value(j, 256) = the accumulated lane j):
//     value(j, s) = op(value(j, 2s), value(j + s, 2s)),   result = value(0, 1).
//
// One row is shared by T threads of the workgroup (T = 1 << tbits, 1..256; 256 / T rows per
// workgroup). Thread t of a row owns lanes t, t+T, t+2T, ... (R = 256 / T lanes): it accumulates
// each of them in element order and combines them into value(t, T) in registers (levels
// 128..T), walking its lanes in bit-reversed order with a binary-counter stack, which pairs
// exactly the operands the halving tree pairs, left operand first. The last log2(T) levels run
// across the row's threads in shared memory with a barrier per level, as the tree says. Every T
// gives the same bits; T only changes how the work is spread (T = 256: thread j is lane j).
// Element e always belongs to the thread with t == e % T, so per-element passes before and after
// a reduction touch only the thread's own elements.
//
// The including shader defines `vec2 tree_load(uint pass, uint e)`, what element e of the
// current row reads from memory for reduction `pass` (loads only), and `float tree_value(uint
// pass, uint e, vec2 loaded)`, the element's value from that (it may also write outputs; each
// element is visited exactly once per reduction, in the lane's ascending order); and, if it
// calls tree_for_each, `vec4 row_load(uint e)` and `void row_elem(uint e, vec4 loaded)` the
// same way. Under TREE_PRELOAD the loops load TREE_UNROLL elements before using any: the
// compiler may not move a load above a store to a buffer that could be the same memory, so a
// load after an element's store waits for that element's value (H100, strict SOFTMAX over rows
// of 32768: 899 -> 1089 GB/s, RMSNORM 1536 -> 1881, LAYERNORM 1200 -> 1302).
//
// Loop budget: lavapipe (gallivm) ends every loop of an invocation once the invocation has run
// 65535 loop iterations in total (LP_MAX_TGSI_LOOP_ITERATIONS, one counter shared by all its
// loops), silently. So the element loops here are unrolled by TREE_UNROLL (a row of 2^24
// elements costs a 256-thread row about 8200 iterations per pass), every workgroup handles
// exactly one group of rows (a 3-D grid covers them all; no grid-stride loop), and the
// launchers refuse a threads-per-row choice whose loops could reach the limit
// (ops::rows::loop_iterations repeats this count).
#ifndef ADEADVM_ROWTREE_GLSL
#define ADEADVM_ROWTREE_GLSL
#include "treeops.glsl"

shared float tree_sh[TREE_LANES];

vec2 tree_load(uint pass, uint e);
float tree_value(uint pass, uint e, vec2 loaded);

const uint TREE_UNROLL = 8u;
// With TREE_PRELOAD defined (the kernels for rows longer than the one-pass kernels take), the
// TREE_UNROLL elements of an iteration are all loaded before any is used: l0 .. l7 (of type T)
// are LOAD(e), LOAD(e + stride), ..., and TREE_LOADED(k, LOAD, i) names lk. Without it (shorter
// rows, which rarely fill an iteration), TREE_LOADED loads at the use: the loaded values would
// hold registers (H100, strict LAYERNORM over rows of 768: 1442 -> 1074 GB/s with them).
#ifdef TREE_PRELOAD
#define TREE_LOAD8(T, LOAD, stride)                                                        \
    T l0 = LOAD(e), l1 = LOAD(e + (stride)), l2 = LOAD(e + 2u * (stride));                 \
    T l3 = LOAD(e + 3u * (stride)), l4 = LOAD(e + 4u * (stride));                          \
    T l5 = LOAD(e + 5u * (stride)), l6 = LOAD(e + 6u * (stride)), l7 = LOAD(e + 7u * (stride));
#define TREE_LOADED(k, LOAD, i) l##k
#else
#define TREE_LOAD8(T, LOAD, stride)
#define TREE_LOADED(k, LOAD, i) LOAD(i)
#endif
#define TREE_LOAD_PASS(i) tree_load(pass, i)
// A load beside the element's own that only some rows need (the mask, gamma, beta), behind a
// uniform branch: under TREE_PRELOAD tree_load and row_load read it, TREE_EARLY(expr), and the
// use takes what they read, TREE_EARLY_OR(loaded, expr); otherwise the load stays at its use,
// inside the use's branch, and the early one is 0 (one branch where the split took two: H100,
// strict SOFTMAX over rows of 768, 1231 -> 1320 GB/s, as before the split).
#ifdef TREE_PRELOAD
#define TREE_EARLY(expr) (expr)
#define TREE_EARLY_OR(loaded, expr) (loaded)
#else
#define TREE_EARLY(expr) 0.0
#define TREE_EARLY_OR(loaded, expr) (expr)
#endif

// Lane `lane` of a row of n elements: init, then op with elements lane, lane+256, ... in order
// (TREE_UNROLL at a time, then the rest one by one).
float tree_lane(uint op, uint pass, uint n, uint lane) {
    float acc = tree_init(op);
    uint e = lane;
    for (; e + 7u * TREE_LANES < n; e += 8u * TREE_LANES) {
        TREE_LOAD8(vec2, TREE_LOAD_PASS, TREE_LANES)
#define TREE_LANE_STEP(k) \
    acc = tree_op(op, acc, tree_value(pass, e + uint(k) * TREE_LANES, TREE_LOADED(k, TREE_LOAD_PASS, e + uint(k) * TREE_LANES)));
        TREE_LANE_STEP(0) TREE_LANE_STEP(1) TREE_LANE_STEP(2) TREE_LANE_STEP(3)
        TREE_LANE_STEP(4) TREE_LANE_STEP(5) TREE_LANE_STEP(6) TREE_LANE_STEP(7)
    }
    for (; e < n; e += TREE_LANES) {
        acc = tree_op(op, acc, tree_value(pass, e, tree_load(pass, e)));
    }
    return acc;
}

// value(t, T) for thread t of a row shared by T = 1 << tbits threads: lanes t + T*q for
// q = bitreverse(p) over 8 - tbits bits, p = 0, 1, ...; after leaf p, the trailing one bits of p
// say how many finished pairs to fold (stack[b] holds a complete subtree of 2^b leaves).
//
// Shortcut, same bits: when no lane of the thread but lane t holds elements (t + T >= n, the
// usual case for rows shorter than 256 with T >= n), the other lanes are all `init`, and the
// halving folds them into lane t's value x as op(x, init) at least once when R > 1; op(x, init)
// is idempotent (strict_add(x, +0) turns -0 into +0 and keeps every other canonical x;
// strict_max(x, -inf) = x) and op(init, init) = init, so the subtree is op(x, init) (x if R = 1).
float tree_thread(uint op, uint pass, uint n, uint t, uint tbits) {
    uint rbits = 8u - tbits;
    uint lanes = 1u << rbits;
    if (t + (1u << tbits) >= n) {
        if (t >= n) {
            return tree_init(op);
        }
        float x = tree_lane(op, pass, n, t);
        return rbits == 0u ? x : tree_op(op, x, tree_init(op));
    }
    float stack[9];
    for (uint p = 0u; p < lanes; p++) {
        uint q = rbits == 0u ? 0u : (bitfieldReverse(p) >> (32u - rbits));
        float cur = tree_lane(op, pass, n, t + (q << tbits));
        uint b = 0u;
        for (; ((p >> b) & 1u) != 0u; b++) {
            cur = tree_op(op, stack[b], cur);
        }
        stack[b] = cur;
    }
    return stack[rbits];
}

// The last log2(T) levels: every invocation of the workgroup calls this with its value(t, T)
// (uniform control flow: it has barriers). Returns the row's result to each thread of the row.
float tree_finish(uint op, float v, uint tbits) {
    uint li = gl_LocalInvocationIndex;
    uint t = li & ((1u << tbits) - 1u);
    tree_sh[li] = v;
    memoryBarrierShared();
    barrier();
    for (uint s = (1u << tbits) >> 1; s > 0u; s >>= 1) {
        if (t < s) {
            tree_sh[li] = tree_op(op, tree_sh[li], tree_sh[li + s]);
        }
        memoryBarrierShared();
        barrier();
    }
    float r = tree_sh[li - t];
    memoryBarrierShared();
    barrier();
    return r;
}

// The whole reduction of the current row (n elements; n = 0 for a padding row past the end).
float tree_reduce(uint op, uint pass, uint n, uint tbits) {
    uint t = gl_LocalInvocationIndex & ((1u << tbits) - 1u);
    return tree_finish(op, tree_thread(op, pass, n, t, tbits), tbits);
}

#ifdef TREE_MAX_CANONICAL
shared int tree_keys[TREE_LANES];

// (Defined where the including shader defines TREE_MAX_CANONICAL: its shared keys would take
// memory from every other row kernel.) The row's max by the tree (TREE_MAX) of values tree_value(pass, e) that are canonical: max is
// exact, so any order gives the tree's result, and this takes it on strict_max_key's keys, each
// thread over its elements e = t, t+T, ... (TREE_UNROLL at a time), then across the row's
// threads in shared memory (a barrier per level, as tree_finish). Called by every invocation of
// the workgroup (it has barriers); n = 0 (a padding row) gives -inf.
float tree_max_canonical(uint pass, uint n, uint tbits) {
    uint T = 1u << tbits;
    uint li = gl_LocalInvocationIndex;
    uint t = li & (T - 1u);
    int k = strict_max_key(S_F(0xff800000u));
    uint e = t;
    for (; e + 7u * T < n; e += 8u * T) {
        TREE_LOAD8(vec2, TREE_LOAD_PASS, T)
#define TREE_MAX_KEY(k) strict_max_key(tree_value(pass, e + uint(k) * T, TREE_LOADED(k, TREE_LOAD_PASS, e + uint(k) * T)))
        k = max(k, max(TREE_MAX_KEY(0), TREE_MAX_KEY(1)));
        k = max(k, max(TREE_MAX_KEY(2), TREE_MAX_KEY(3)));
        k = max(k, max(TREE_MAX_KEY(4), TREE_MAX_KEY(5)));
        k = max(k, max(TREE_MAX_KEY(6), TREE_MAX_KEY(7)));
    }
    for (; e < n; e += T) {
        k = max(k, strict_max_key(tree_value(pass, e, tree_load(pass, e))));
    }
    tree_keys[li] = k;
    memoryBarrierShared();
    barrier();
    for (uint s = T >> 1; s > 0u; s >>= 1) {
        if (t < s) {
            tree_keys[li] = max(tree_keys[li], tree_keys[li + s]);
        }
        memoryBarrierShared();
        barrier();
    }
    float r = strict_key_value(tree_keys[li - t]);
    memoryBarrierShared();
    barrier();
    return r;
}
#endif

vec4 row_load(uint e);
void row_elem(uint e, vec4 loaded);

// row_elem(e, row_load(e)) for this thread's elements of a row of n: e = t, t+T, t+2T, ...
// (T = 1 << tbits), TREE_UNROLL at a time.
void tree_for_each(uint n, uint tbits) {
    uint T = 1u << tbits;
    uint e = gl_LocalInvocationIndex & (T - 1u);
    for (; e + 7u * T < n; e += 8u * T) {
        TREE_LOAD8(vec4, row_load, T)
#define TREE_ROW_ELEM(k) row_elem(e + uint(k) * T, TREE_LOADED(k, row_load, e + uint(k) * T));
        TREE_ROW_ELEM(0) TREE_ROW_ELEM(1) TREE_ROW_ELEM(2) TREE_ROW_ELEM(3)
        TREE_ROW_ELEM(4) TREE_ROW_ELEM(5) TREE_ROW_ELEM(6) TREE_ROW_ELEM(7)
    }
    for (; e < n; e += T) {
        row_elem(e, row_load(e));
    }
}

// TREE_ROW_BEGIN: the start of a kernel whose push constants have `rows`, `n` and `tbits`: a
// workgroup without rows returns (uniformly, before any barrier); then `row` (this invocation's;
// may be a padding row) and `n` (0 for a padding row).
#define TREE_ROW_BEGIN                                                                     \
    if (!tree_group_live(p.rows, p.tbits)) {                                                \
        return;                                                                             \
    }                                                                                       \
    uint row = tree_row(p.tbits);                                                           \
    uint n = row < p.rows ? p.n : 0u;

// Whether this workgroup has rows: groups = ceil(rows / (256 >> tbits)); the grid may have a
// few more workgroups than that, and those return at once (uniformly, before any barrier).
bool tree_group_live(uint rows, uint tbits) {
    uint rpg = TREE_LANES >> tbits;
    return tree_group() < rows / rpg + ((rows % rpg) != 0u ? 1u : 0u);
}

// The row this invocation works on (may be >= rows: a padding row of the last group).
uint tree_row(uint tbits) { return tree_group() * (TREE_LANES >> tbits) + (gl_LocalInvocationIndex >> tbits); }

#endif // ADEADVM_ROWTREE_GLSL
