// fastrow.glsl -- what the fast tier's one-pass row kernels (softmax_fast, layernorm_fast)
// share: a workgroup of 256 threads per row, each thread holding its FAST_PER elements
// (e = j * 256 + t) in registers, so a row is read once and written once (rows of 1024 to
// FAST_PER * 256 elements; ops::rows picks these kernels only for those, on devices with
// subgroup shuffles in compute shaders). Reductions run in a fixed order: a butterfly of
// shuffles within each subgroup (every lane ends with the same bits: each step adds two values
// the same way round), then the subgroups' results in subgroup order. The same bits run to run
// on one device (not the strict tier's tree, nor the CPU's bits). One barrier a reduction,
// where the halving tree in shared memory it replaced took nine (measured on an H100, fast
// SOFTMAX over rows of 4096: 1330 -> 1390 GB/s; LAYERNORM over rows of 1024: 809 -> 865).
#ifndef ADEADVM_FASTROW_GLSL
#define ADEADVM_FASTROW_GLSL
// The including shader enables GL_KHR_shader_subgroup_basic and _shuffle (shaders/build.sh
// compiles a shader that names GL_KHR_shader_subgroup for Vulkan 1.1: SPIR-V 1.3).
#extension GL_EXT_control_flow_attributes : require

layout(local_size_x = 256) in;
// FAST_PER, the elements a thread holds, is defined by the including shader
// (shaders/{softmax,layernorm}_fast_<PER>.comp; ops::rows::fast_row_kernel).
#ifndef FAST_PER
#error "define FAST_PER"
#endif
// Each reduction of a kernel has its own slot (`slot`, 0 or 1), so one never overwrites
// partials another thread may still be reading: one barrier each.
shared float fast_part[2][256];

// FAST_ROW_BEGIN: the kernels' common start (their push constants have `rows` and `n`): a
// workgroup past the last row returns (uniformly, before any barrier); then `row`, `t` (the
// thread), `n` and `base` (the row's first element).
#define FAST_ROW_BEGIN                                                                     \
    uint row = fast_row();                                                                  \
    if (row >= p.rows) {                                                                    \
        return;                                                                             \
    }                                                                                       \
    uint t = gl_LocalInvocationIndex, n = p.n, base = row * n;

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
        uint e = j * 256u + t;                                                              \
        if (e < n) {                                                                        \
            y[base + e] = (expr);                                                           \
        }                                                                                   \
    }
#define FAST_STORE_ROW FAST_STORE(v[j])

// The row of this workgroup (the grid is x, then y, then z).
uint fast_row() {
    return (gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x + gl_WorkGroupID.x;
}

// The workgroup's max (is_max) or sum of one value per thread; every thread gets it. Called
// by every thread of the workgroup.
float fast_reduce(float v, bool is_max, uint slot) {
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
    return r;
}

#endif // ADEADVM_FASTROW_GLSL
