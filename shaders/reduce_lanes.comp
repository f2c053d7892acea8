#version 450
// REDUCE_SUM / REDUCE_MEAN over few long rows, strict tier: the first of two passes (ops::rows
// reduce). It computes each row's 256 lane sums of numerics::reduce's tree (lane j: +0, then
// the row's elements j, j+256, ... added in order: a chain of adds, which the strict tier may
// not regroup), each workgroup 8 lanes of one row, so a row is spread over 32 workgroups where
// shaders/include/reduce.glsl gives it one. The second pass (reduce.glsl with its flag 4) folds
// the 256 lane sums with the tree's levels and divides for a mean.
//
// A lane's chain adds one element after another, so its loads must be in flight long before
// their adds: the workgroup's first subgroup walks (8 threads, one a lane) while the other 224
// threads load: they load a block of 448 steps of its 8 lanes (14 KB) into registers, store it
// flushed to shared memory and load the next block while the walkers walk the block before,
// four steps a shared-memory read (a lane's steps are contiguous there), sixteen a loop
// iteration; two shared buffers, one barrier a block. The walking threads do nothing but the
// chain's adds: the elements' flush is the loading threads' work, and no store of theirs waits
// on a global load.
// Measured on an H100 (strict sum of 2^24 elements to one): 30 GB/s as one workgroup a row
// (reduce_256), 119 here with a step a read, 129 with four and eight steps an iteration, the
// walkers flushing each element; 267 with the flush moved to the loaders and sixteen steps an
// iteration (32 rows of 2^19: 950 -> 1358; 4 rows of 2^22: 476 -> 920). Issuing the next
// sixteen steps' reads before this sixteen's adds gave 274 (not kept: within 3%); 4 lanes a
// workgroup (64 workgroups a row) gave 141 for one row against 129 but 581 against 957 for 32
// rows of 2^19 (sectors half used). On an H200, with the walkers' subgroup loading too (all
// 256 threads loading blocks of 512 steps): 268 GB/s for 2^24 to one, 926 for 4 rows of 2^22,
// 1440 for 32 of 2^19; with a subgroup that only walks (a workgroup of 288, the same loads):
// 301, 1028 and 1515, and this layout keeps the workgroup at 256. The walk alone bounds it:
// with no loads or stores in the loop (wrong sums, for the timing) 361, without the barriers
// too 365; loading two blocks ahead gave 272.
//
// Arithmetic as reduce.glsl's sums: elements flushed, a `precise` add whose result is flushed
// (by the hardware where HW_FTZ is set), NaN canonicalized by the second pass.
#extension GL_GOOGLE_include_directive : require
#include "treeops.glsl"

layout(local_size_x = 256) in;
layout(constant_id = 0) const bool HW_FTZ = false;
layout(set = 0, binding = 0) writeonly buffer Y { float y[]; }; // [rows, 256] lane sums
layout(set = 0, binding = 1) readonly buffer X { float x[]; };  // [rows, len]
layout(push_constant) uniform P {
    uint rows;
    uint len;
} p;

const uint LANES = 8u;                  // lanes a workgroup (ops::rows reduce LANES_PER_GROUP)
const uint GROUPS = 256u / LANES;       // workgroups a row
const uint WALKERS = 32u;               // the first 32 threads: LANES walk, the rest idle
const uint LOADERS = 256u - WALKERS;    // threads that load and store
const uint PER = 16u;                   // loads a loading thread a block
const uint BLOCK = LOADERS * PER / LANES; // steps a block (448, a multiple of 16)
const uint PITCH = BLOCK + 32u / LANES; // a lane's steps in shared memory, padded: no bank conflicts
shared vec4 staged4[2u * LANES * PITCH / 4u]; // [buffer][lane][step]

float add(float a, float b) { return tree_lane_add(a, b, HW_FTZ); }

void main() {
    uint group = tree_group();
    if (group >= p.rows * GROUPS) {
        return; // the grid's spare workgroups (uniform: before any barrier)
    }
    uint row = group / GROUPS;
    uint lane0 = (group % GROUPS) * LANES;
    uint li = gl_LocalInvocationIndex;
    uint steps = (p.len + 255u) / 256u;
    uint blocks = (steps + BLOCK - 1u) / BLOCK;
    // Loading thread lt's loads of a block: f = lt + LOADERS k holds step f / LANES, lane
    // f % LANES, so eight neighbouring threads read one 32-byte run of a step; stored at
    // [lane][step]. Threads LANES to WALKERS - 1 idle, so that on a device with subgroups of
    // 32 the walkers' subgroup has no other work.
    uint row_base = row * p.len;
    bool loads = li >= WALKERS;
    uint lt = li - WALKERS;
    uint step0 = lt / LANES;
    float v[PER];
#define LANES_LOAD(k, b)                                                               \
    {                                                                                  \
        uint e = ((b) * BLOCK + step0 + (k) * (LOADERS / LANES)) * 256u + lane0 + lt % LANES; \
        v[k] = e < p.len ? x[row_base + e] : 0.0;                                      \
    }
#define LANES_LOADS16(b)                                                                 \
    LANES_LOAD(0, b) LANES_LOAD(1, b) LANES_LOAD(2, b) LANES_LOAD(3, b)                \
    LANES_LOAD(4, b) LANES_LOAD(5, b) LANES_LOAD(6, b) LANES_LOAD(7, b)                \
    LANES_LOAD(8, b) LANES_LOAD(9, b) LANES_LOAD(10, b) LANES_LOAD(11, b)              \
    LANES_LOAD(12, b) LANES_LOAD(13, b) LANES_LOAD(14, b) LANES_LOAD(15, b)
#define LANES_LOADS(b) LANES_LOADS16(b)
#define LANES_STORE(k, buf)                                                            \
    {                                                                                  \
        uint at = ((buf) * LANES + lt % LANES) * PITCH + step0 + (k) * (LOADERS / LANES); \
        staged4[at / 4u][at % 4u] = strict_ftz(v[k]);                                  \
    }
#define LANES_STORES(buf)                                                              \
    LANES_STORE(0, buf) LANES_STORE(1, buf) LANES_STORE(2, buf) LANES_STORE(3, buf)    \
    LANES_STORE(4, buf) LANES_STORE(5, buf) LANES_STORE(6, buf) LANES_STORE(7, buf)    \
    LANES_STORE(8, buf) LANES_STORE(9, buf) LANES_STORE(10, buf) LANES_STORE(11, buf)  \
    LANES_STORE(12, buf) LANES_STORE(13, buf) LANES_STORE(14, buf) LANES_STORE(15, buf)
    if (loads) {
        LANES_LOADS(0u)
        LANES_STORES(0u)
    }
    memoryBarrierShared();
    barrier();
    // The chain of lane lane0 + li (threads li < LANES): its steps, +0 then each element.
    uint lane = lane0 + li;
    uint my_steps = lane < p.len ? (p.len - lane + 255u) / 256u : 0u;
    float acc = 0.0;
    for (uint b = 0u; b < blocks; b++) {
        uint buf = b & 1u;
        bool more = b + 1u < blocks;
        if (more && loads) {
            LANES_LOADS(b + 1u)
        }
        if (li < LANES) {
            uint done = b * BLOCK;
            uint count = my_steps > done ? min(BLOCK, my_steps - done) : 0u;
            uint at = (buf * LANES + li) * PITCH / 4u; // this lane's steps of the block, as vec4s
            uint k = 0u;
            for (; k + 16u <= count; k += 16u) {
                vec4 s0 = staged4[at + k / 4u], s1 = staged4[at + k / 4u + 1u];
                vec4 s2 = staged4[at + k / 4u + 2u], s3 = staged4[at + k / 4u + 3u];
                acc = add(add(add(add(acc, s0.x), s0.y), s0.z), s0.w);
                acc = add(add(add(add(acc, s1.x), s1.y), s1.z), s1.w);
                acc = add(add(add(add(acc, s2.x), s2.y), s2.z), s2.w);
                acc = add(add(add(add(acc, s3.x), s3.y), s3.z), s3.w);
            }
            for (; k < count; k++) {
                acc = add(acc, staged4[at + k / 4u][k % 4u]);
            }
        }
        if (more && loads) {
            LANES_STORES(buf ^ 1u)
        }
        memoryBarrierShared();
        barrier();
    }
    if (li < LANES) {
        y[row * 256u + lane] = acc;
    }
}
