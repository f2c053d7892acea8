// reduce.glsl -- REDUCE_SUM / REDUCE_MEAN / REDUCE_MAX (shaders/reduce_{1,8,32,256}.comp, one
// per REDUCE_T, the threads that share one output): exactly exec::cpu::reference::reduce, the
// 256-lane tree of numerics::reduce (docs/numerics.md), for every output of the pass.
//
// x is viewed as [outer, len, inner]; a pass may cut the reduced axis into nseg segments of
// seg elements (the last may be shorter): pass output r = (o * nseg + s) * inner + i reduces
// the elements e = 0 .. n-1 of segment s, x[(o * len + s * seg + e) * inner + i], with the tree.
// With nseg = 1 that is the instruction itself. ops::rows cuts an axis only where the result
// does not depend on it: always for max (exact, so any grouping gives the tree's result), and
// in the fast tier for sums (its own fixed grouping, the same run to run), then reduces the
// nseg partial results of each output in a second pass.
//
// The tree: lane j (0..255) accumulates elements j, j+256, ... in order from its start value
// (+0 for sums, -inf for max), then levels s = 128, 64, .., 1 fold lane j+s into lane j. A
// workgroup of 256 holds C = 256 / T outputs, T threads each; thread t of an output owns lanes
// t + q*T, q = 0 .. L-1 (L = 256 / T = C), and walks them together, a step of 256 elements at
// a time (its L loads of a step, U steps at once, before any is added: the memory sees L*U
// loads of the thread in flight), so every lane still sees its elements in order. The levels
// 128 .. T pair lanes of the same thread (q with q + s/T) and run in registers; the last
// log2(T) run across the output's threads in shared memory.
//
// Short segments (REDUCE_T = 1, segments of at most SHORT_SEG elements, 16 or 32: ops::rows
// picks it only for those): a thread an output, element e in lane e, the only element of its lane; lanes
// SHORT_SEG .. 255 hold only the start value. Levels 128 .. SHORT_SEG pair a lane with such a
// lane, and combine(combine(start, x), start) == combine(start, x) (a sum's first add has
// flushed x and turned -0 into +0; max is idempotent), so those levels change no bit and the
// thread folds its SHORT_SEG lanes alone: no shared memory, no barrier. (The first add is
// written in integer operations: first_element.)
//
// Layout: where inner = 1 an output's elements are contiguous and its T threads are
// neighbours (t = index % T); where inner > 1 neighbouring outputs are neighbouring words, so
// the C outputs of a workgroup are its neighbouring threads (t = index / C) and a warp's loads
// of one step are whole rows of C words.
//
// Arithmetic: sums add flushed elements (strict_ftz) with a `precise` add whose result is
// flushed (by the hardware where HW_FTZ is set: ops::rows' probe saw the device flush denormal
// sums exactly so) and canonicalize a NaN only at the end (every NaN stays NaN): the bits of
// numerics::sum. Mean is strict_div(sum, nf), nf = len as f32. Max takes strict_max_key of the
// canonicalized elements and the integer max (strict.glsl: the key order is strict_max's).
// Accumulators are kept as uint bits for both.
#ifndef ADEADVM_REDUCE_GLSL
#define ADEADVM_REDUCE_GLSL
#include "treeops.glsl"

const uint T = REDUCE_T;
const uint L = 256u / REDUCE_T; // lanes a thread, and outputs a workgroup
layout(local_size_x = 256) in;
layout(constant_id = 0) const bool HW_FTZ = false;
layout(constant_id = 1) const bool IS_MAX = false;
layout(set = 0, binding = 0) writeonly buffer Y { float y[]; };
layout(set = 0, binding = 1) readonly buffer X { float x[]; };
layout(push_constant) uniform P {
    uint outs;  // outputs of this pass: outer * nseg * inner
    uint len;   // the reduced axis
    uint inner;
    uint seg;   // elements a segment (len where nseg = 1)
    uint nseg;
    uint flags; // 1: inner > 1 layout; 2: mean (divide by nf); 4: the elements are lane sums
    //             (reduce_lanes.comp's, len = 256): lane j starts at element j, not at +0
    float nf;
} p;

shared uint reduce_sh[256];

uint start_value() { return IS_MAX ? uint(strict_max_key(S_F(0xff800000u))) : 0u; }
uint element(float v) { return IS_MAX ? uint(strict_max_key(strict_canon(v))) : floatBitsToUint(strict_ftz(v)); }
uint combine(uint a, uint b) {
    if (IS_MAX) {
        return uint(max(int(a), int(b)));
    }
    return floatBitsToUint(tree_lane_add(uintBitsToFloat(a), uintBitsToFloat(b), HW_FTZ));
}

// X(u, q) for every lane q of the thread and step u of an iteration, written out with
// literals (the arrays below are indexed only by constants: NVIDIA's compiler moves arrays
// indexed otherwise to local memory).
#if REDUCE_T == 256
#define REDUCE_U 16
#define REDUCE_FOR_Q(X, u) X(u, 0)
#elif REDUCE_T == 32
#define REDUCE_U 2
#define REDUCE_FOR_Q4(X, u, q) X(u, q) X(u, q + 1) X(u, q + 2) X(u, q + 3)
#define REDUCE_FOR_Q(X, u) REDUCE_FOR_Q4(X, u, 0) REDUCE_FOR_Q4(X, u, 4)
#elif REDUCE_T == 8
#define REDUCE_U 1
#define REDUCE_FOR_Q4(X, u, q) X(u, q) X(u, q + 1) X(u, q + 2) X(u, q + 3)
#define REDUCE_FOR_Q16(X, u, q) REDUCE_FOR_Q4(X, u, q) REDUCE_FOR_Q4(X, u, q + 4) REDUCE_FOR_Q4(X, u, q + 8) REDUCE_FOR_Q4(X, u, q + 12)
#define REDUCE_FOR_Q(X, u) REDUCE_FOR_Q16(X, u, 0) REDUCE_FOR_Q16(X, u, 16)
#elif REDUCE_T == 1
#define REDUCE_U 1
#else
#error "REDUCE_T is 1, 8, 32 or 256"
#endif
#if REDUCE_T == 1
#elif REDUCE_U == 1
#define REDUCE_FOR_UQ(X) REDUCE_FOR_Q(X, 0)
#elif REDUCE_U == 2
#define REDUCE_FOR_UQ(X) REDUCE_FOR_Q(X, 0) REDUCE_FOR_Q(X, 1)
#else
#define REDUCE_FOR_U4(X, u) REDUCE_FOR_Q(X, u) REDUCE_FOR_Q(X, u + 1) REDUCE_FOR_Q(X, u + 2) REDUCE_FOR_Q(X, u + 3)
#define REDUCE_FOR_UQ(X) REDUCE_FOR_U4(X, 0) REDUCE_FOR_U4(X, 4) REDUCE_FOR_U4(X, 8) REDUCE_FOR_U4(X, 12)
#endif
const uint STEP = 256u;            // elements a step: one for each lane
const uint ITER = REDUCE_U * STEP; // elements an iteration of the main loop

// The in-register levels: lane q + h into lane q for q < h, h = L/2 .. 1.
#define FOLD1(q, h) acc[q] = combine(acc[q], acc[(q) + (h)]);
#define FOLD2(q, h) FOLD1(q, h) FOLD1((q) + 1, h)
#define FOLD4(q, h) FOLD2(q, h) FOLD2((q) + 2, h)
#define FOLD8(q, h) FOLD4(q, h) FOLD4((q) + 4, h)
#define FOLD16(q, h) FOLD8(q, h) FOLD8((q) + 8, h)

// Output r's result from its tree's bits: the float (canonical) or the max key's value, a
// mean divided by nf.
void store_output(uint r, uint bits) {
    float out_v;
    if (IS_MAX) {
        out_v = strict_key_value(int(bits));
    } else {
        out_v = strict_canon(uintBitsToFloat(bits));
        if ((p.flags & 2u) != 0u) {
            out_v = strict_div(out_v, p.nf);
        }
    }
    y[r] = out_v;
}

// Pass output r's place: `base` its first element, `n` its element count (0 past the outputs),
// elements base + e * p.inner.
void output_place(uint r, out uint base, out uint n) {
    bool valid = r < p.outs;
    uint i = valid ? r % p.inner : 0u;
    uint os = valid ? r / p.inner : 0u;
    uint s = os % p.nseg, o = os / p.nseg;
    uint first = s * p.seg;
    n = valid ? min(p.seg, p.len - first) : 0u;
    base = (o * p.len + first) * p.inner + i;
}

#if REDUCE_T == 1
// The elements an output holds at most, 16 or 32 (ops::rows reduce picks it; REDUCE_SHORT_SEG).
layout(constant_id = 2) const uint SHORT_SEG = 32u;
// Contiguous outputs of whole quads (inner 1, one segment, len a multiple of 4): a thread's
// elements are loaded four at a time, as uvec4s (fewer, wider loads; its row starts on a
// quad). H100, strict REDUCE_SUM, GB/s: rows of 32 869 -> 1711, 16 1688 -> 2283, 4 1630 -> 1800.
layout(constant_id = 3) const bool SHORT_QUADS = false;
layout(set = 0, binding = 1) readonly buffer X4 { uvec4 x4[]; };

// combine(start_value(), e) for an element e (element()'s bits): for max the key itself, for a
// sum tree_sum_first (in integer operations: see there).
uint first_element(uint e) { return IS_MAX ? e : tree_sum_first(e); }

void main() {
    uint r = tree_group() * 256u + gl_LocalInvocationIndex;
    if (r >= p.outs) {
        return; // no barrier in this kernel
    }
    uint base, n;
    output_place(r, base, n);
    if (n == 0u) {
        store_output(r, start_value());
        return;
    }
    // Every load issued before any arithmetic (past the segment's end: its last element, unused).
    uint last = n - 1u;
    // Lanes SHORT_SEG .. 31 are never read (the specialized pipeline drops their code).
    uint acc[32];
    if (SHORT_QUADS) {
        // Quad j holds elements 4j .. 4j + 3; a quad past the row's end repeats its last, unused.
        uint q0 = base / 4u, lastq = last / 4u;
#define SHORT_QUAD(j)                                                                      \
    if (4u * uint(j) < SHORT_SEG) {                                                        \
        uvec4 w = x4[q0 + min(uint(j), lastq)];                                            \
        acc[4 * (j)] = element(uintBitsToFloat(w.x));                                       \
        acc[4 * (j) + 1] = element(uintBitsToFloat(w.y));                                   \
        acc[4 * (j) + 2] = element(uintBitsToFloat(w.z));                                   \
        acc[4 * (j) + 3] = element(uintBitsToFloat(w.w));                                   \
    }
        SHORT_QUAD(0) SHORT_QUAD(1) SHORT_QUAD(2) SHORT_QUAD(3)
        SHORT_QUAD(4) SHORT_QUAD(5) SHORT_QUAD(6) SHORT_QUAD(7)
    } else {
#define SHORT_LOAD(q) if (uint(q) < SHORT_SEG) { acc[q] = element(x[base + min(uint(q), last) * p.inner]); }
#define SHORT_LANE(q) if (uint(q) < SHORT_SEG) { acc[q] = uint(q) < n ? first_element(acc[q]) : start_value(); }
#define SHORT_EACH4(X, q) X(q) X(q + 1) X(q + 2) X(q + 3)
#define SHORT_EACH16(X, q) SHORT_EACH4(X, q) SHORT_EACH4(X, q + 4) SHORT_EACH4(X, q + 8) SHORT_EACH4(X, q + 12)
#define SHORT_EACH(X) SHORT_EACH16(X, 0) SHORT_EACH16(X, 16)
        SHORT_EACH(SHORT_LOAD)
    }
    SHORT_EACH(SHORT_LANE)
    if (SHORT_SEG == 32u) {
        FOLD16(0, 16)
    }
    FOLD8(0, 8) FOLD4(0, 4) FOLD2(0, 2) FOLD1(0, 1)
    store_output(r, acc[0]);
}
#else
void main() {
    uint group = tree_group();
    if (group * L >= p.outs) {
        return; // the grid's spare workgroups (uniform: before any barrier)
    }
    uint li = gl_LocalInvocationIndex;
    bool strided = (p.flags & 1u) != 0u;
    uint c = strided ? li % L : li / T;
    uint t = strided ? li / L : li % T;
    uint r = group * L + c;
    bool valid = r < p.outs;
    uint base, n;
    output_place(r, base, n); // element e at base + e * inner
    uint stride = p.inner;
    bool given = (p.flags & 4u) != 0u;

    uint acc[L];
    uint v[REDUCE_U * L];
#define REDUCE_INIT(u, q) acc[q] = start_value();
    REDUCE_FOR_Q(REDUCE_INIT, 0)
    uint sb = 0u;
    for (; sb + ITER <= n; sb += ITER) {
#define REDUCE_LOAD(u, q) v[(u) * L + (q)] = element(x[base + (sb + (u) * STEP + t + (q) * T) * stride]);
#define REDUCE_ADD(u, q) acc[q] = given ? v[(u) * L + (q)] : combine(acc[q], v[(u) * L + (q)]);
        REDUCE_FOR_UQ(REDUCE_LOAD)
        REDUCE_FOR_UQ(REDUCE_ADD)
    }
    for (; sb < n; sb += STEP) {
#define REDUCE_TAIL(u, q) \
    if (sb + t + (q) * T < n) {                                                                       \
        uint el = element(x[base + (sb + t + (q) * T) * stride]);                                     \
        acc[q] = given ? el : combine(acc[q], el);                                                    \
    }
        REDUCE_FOR_Q(REDUCE_TAIL, 0)
    }
#if REDUCE_T == 8
    FOLD16(0, 16) FOLD8(0, 8) FOLD4(0, 4) FOLD2(0, 2) FOLD1(0, 1)
#elif REDUCE_T == 32
    FOLD4(0, 4) FOLD2(0, 2) FOLD1(0, 1)
#endif

    uint slot = c * T + t;
    reduce_sh[slot] = acc[0];
    memoryBarrierShared();
    barrier();
    for (uint h = T / 2u; h > 0u; h >>= 1) {
        if (t < h) {
            reduce_sh[slot] = combine(reduce_sh[slot], reduce_sh[slot + h]);
        }
        memoryBarrierShared();
        barrier();
    }
    if (valid && t == 0u) {
        store_output(r, reduce_sh[slot]);
    }
}
#endif

#endif // ADEADVM_REDUCE_GLSL
