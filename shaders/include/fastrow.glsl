// fastrow.glsl -- what the fast tier's one-pass row kernels (softmax_fast, layernorm_fast,
// rmsnorm_fast) share: FAST_T threads a row (1 to 1024), each thread holding its FAST_PER elements
// (e = j * FAST_T + t) in registers, so a row is read once and written once (rows of
// FAST_ONE_PASS_ROW_MIN to FAST_PER * FAST_T elements; ops::rows picks these kernels only for
// those, on devices with subgroup shuffles in compute shaders). Reductions run in a fixed order: a
// butterfly of shuffles within each subgroup's part of a row (every lane ends with the same bits:
// each step adds two values the same way round), then those parts' results in order. The same bits
// run to run on one device (not the strict tier's tree, nor the CPU's bits). One barrier a
// reduction, where the halving tree in shared memory it replaced took nine (measured on an H100,
// fast SOFTMAX over rows of 4096: 1330 -> 1390 GB/s; LAYERNORM over rows of 1024: 809 -> 865).
//
// A thread's place is its subgroup's number times the subgroup size plus its place in the
// subgroup (fast_place), so a row's threads are whole subgroups, or whole parts of one, however
// the device numbers invocations into subgroups; like the butterfly, it takes the workgroup's
// subgroups to be full (256 or FAST_T threads, a power-of-two subgroup size).
#ifndef ADEADVM_FASTROW_GLSL
#define ADEADVM_FASTROW_GLSL
// The including shader enables GL_KHR_shader_subgroup_basic and _shuffle (shaders/build.sh
// compiles a shader that names GL_KHR_shader_subgroup for Vulkan 1.1: SPIR-V 1.3).
#extension GL_EXT_control_flow_attributes : require

// FAST_PER, the elements a thread holds, and FAST_T, the threads a row (256 unless defined), are
// defined by the including shader (shaders/{softmax,layernorm,rmsnorm}_fast_[<T>x]<PER>.comp;
// ops::rows::RowOp::one_pass_kernel).
#ifndef FAST_PER
#error "define FAST_PER"
#endif
#ifndef FAST_T
#define FAST_T 256
#endif
// A workgroup of 256 threads holds 256 / FAST_T rows; a row of more threads (1024, for rows of
// up to 32768 elements on devices that allow such workgroups) is a workgroup of its own.
#if FAST_T > 256
layout(local_size_x = FAST_T) in;
const uint FAST_ROWS = 1u;
#else
layout(local_size_x = 256) in;
const uint FAST_ROWS = 256u / FAST_T;
#endif
// Each reduction of a kernel has its own slot (`slot`, 0 or 1), so one never overwrites
// partials another thread may still be reading: one barrier each. A part for each subgroup
// (each FAST_T threads where a subgroup holds several rows): at most 256 of them.
shared float fast_part[2][256];

// The thread's place in the workgroup (see the top).
uint fast_place() { return gl_SubgroupID * gl_SubgroupSize + gl_SubgroupInvocationID; }

// FAST_ROW_BEGIN: the kernels' common start (their push constants have `rows` and `n`): a
// workgroup past the last row returns (uniformly, before any barrier); then `row`, `t` (the
// thread's place in its row), `n` (0 for a padding row of the last workgroup, whose threads
// still take part in the barriers) and `base` (the row's first element); FAST_LAST, the last
// element's index in any row (where gamma and beta are read clamped). With a row a
// workgroup, the thread's place is its invocation index (fast_place's bookkeeping and the
// padding rows' cost 12% over rows of 16384: H100, fast LAYERNORM, 2940 -> 2595 GB/s).
#if FAST_T >= 256
#define FAST_ROW_BEGIN                                                                     \
    uint row = fast_group();                                                                \
    if (row >= p.rows) {                                                                    \
        return;                                                                             \
    }                                                                                       \
    uint t = gl_LocalInvocationIndex, n = p.n, base = row * n;
#define FAST_LAST (n - 1u)
#else
#define FAST_ROW_BEGIN                                                                     \
    if (fast_group() * FAST_ROWS >= p.rows) {                                               \
        return;                                                                             \
    }                                                                                       \
    uint row = fast_group() * FAST_ROWS + fast_place() / FAST_T;                            \
    uint t = fast_place() % FAST_T, n = row < p.rows ? p.n : 0u, base = row * p.n;
#define FAST_LAST (p.n - 1u)
#endif

// Element j of the thread's row.
#define fast_elem(j) ((j) * FAST_T + t)

// FAST_STORE(expr): expr (of v[j]) stored as element j's output; FAST_STORE_ROW the elements
// themselves, for kernels that read more than x after their reductions (gamma, beta): they
// store only after their last load. The compiler may not move a load above a store to a buffer
// that could be the same memory, so with a load between each element's store and the next,
// each waited for the element before it. Where nothing is loaded after the reductions, the
// kernels store as they compute. H100, fast LAYERNORM over rows of 16384, GB/s: with gamma and
// beta 1479-1658 -> 2194-2709; without them 2834 before, 2558 with both paths' store loops
// written apart, 2865-2885 with this one loop (each element's index computed once).
#define FAST_STORE(expr)                                                                   \
    [[unroll]] for (uint j = 0u; j < FAST_PER; j++) {                                       \
        uint e = fast_elem(j);                                                              \
        if (e < n) {                                                                        \
            y[base + e] = (expr);                                                           \
        }                                                                                   \
    }
#define FAST_STORE_ROW FAST_STORE(v[j])

// This workgroup's index in the launch's grid (x fastest, then y, then z).
uint fast_group() {
    return (gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x + gl_WorkGroupID.x;
}

// The row's max (is_max) or sum of one value per thread; every thread of the row gets it.
// Called by every thread of the workgroup.
float fast_reduce(float v, bool is_max, uint slot) {
#if FAST_T >= 256
    // A row a workgroup: the butterfly within each subgroup, then the subgroups' results in
    // order (the general form below with its place arithmetic, written apart as FAST_ROW_BEGIN
    // is, so that these kernels keep the code measured above).
    for (uint o = gl_SubgroupSize >> 1; o > 0u; o >>= 1) {
        float w = subgroupShuffleXor(v, o);
        v = is_max ? max(v, w) : v + w;
    }
    if (gl_SubgroupInvocationID == 0u) {
        fast_part[slot][gl_SubgroupID] = v;
    }
    barrier();
    float r = fast_part[slot][0];
    for (uint i = 1u; i < gl_NumSubgroups; i++) {
        r = is_max ? max(r, fast_part[slot][i]) : r + fast_part[slot][i];
    }
#else
    // The butterfly over the row's part of the subgroup (the whole subgroup, or FAST_T threads
    // of it), then those parts' results in order.
    uint width = min(gl_SubgroupSize, FAST_T), place = fast_place();
    for (uint o = width >> 1; o > 0u; o >>= 1) {
        float w = subgroupShuffleXor(v, o);
        v = is_max ? max(v, w) : v + w;
    }
    // A row within one subgroup: every thread of it already holds the result (the single part
    // the code below would read back), so no shared memory and no barrier. H100, fast SOFTMAX
    // over 16M elements, GB/s: rows of 4 (1 thread a row) 1425 -> 1565, 8 1542 -> 1736, 16
    // 2416 -> 2583.
    if (FAST_T <= gl_SubgroupSize) {
        return v;
    }
    if (place % width == 0u) {
        fast_part[slot][place / width] = v;
    }
    barrier();
    uint first = place / FAST_T * (FAST_T / width);
    float r = fast_part[slot][first];
    for (uint i = 1u; i < FAST_T / width; i++) {
        r = is_max ? max(r, fast_part[slot][first + i]) : r + fast_part[slot][first + i];
    }
#endif
    return r;
}

#endif // ADEADVM_FASTROW_GLSL
