#version 450
// The fast tier's f32 MATMUL on bf16 cooperative matrices (ops::rows::matmul_split_bf16), its
// first pass: each f32 operand element x is cut into three bf16 pieces whose sum is exactly x,
//     hi  = x rounded to nearest even on bf16's 8 significant bits (toward zero where that
//           would overflow),
//     mid = x - hi likewise (exact: a rounding error is representable),
//     lo  = x - hi - mid (exact, and at most 8 significant bits, so a bf16 itself),
// and the pieces are laid out along k so that one bf16 GEMM of k' = 6k sums six of the nine
// products of a's and b's pieces: all but mid*lo, lo*mid and lo*lo, at most 2^-23 |a*b| together
// (|mid| <= 2^-8 |x|, |lo| <= 2^-16 |x|; f32's own rounding of a product is up to 2^-24 |a*b|).
// ops::rows::SPLIT_SEGMENTS has the order.
//
// x is `batch` matrices of [rows, k] (TRANS = 0: k contiguous) or [k, rows] (TRANS = 1) f32;
// y is `batch` matrices of [rows, 6k] bf16, two a word (element 2j is the low half of word j):
// y[b][r][s*k + kk] = piece(s) of x at (b, r, kk), piece(s) = (p.pieces >> 2s) & 3 (0 hi, 1 mid,
// 2 lo). k is even, so every word holds two elements of one segment.
//
// The pieces are exact and normal where x is a normal float of magnitude 2^-103 or more (lo's
// lowest bit, 2^-23 of x's leading one, is then a normal float's). Elsewhere they are not what
// the GEMM needs: below 2^-103 mid and lo may be denormal, which NVIDIA flushes (a product of
// such an x with a huge partner would lose up to 2^-8 of itself), and inf and NaN go whole into
// hi (a NaN stays a NaN) with mid = lo = 0, where an inf times a zero piece of its partner gives
// NaN. So such an element sets its row's word in `flag` (zeroed before; f32 denormals, which
// every f32 kernel on NVIDIA flushes to zero, do not), and the last pass
// (shaders/sgemm_split_finish.comp) sums every output of a flagged row of a or column of b
// again in f32.
//
// A workgroup moves a 64 x 64 tile (rows by k) through shared memory, cut as it is stored: its
// loads take whole runs of 64 words of the contiguous axis, its stores whole runs of 32 words.

layout(local_size_x = 256) in;
layout(constant_id = 0) const bool TRANS = false;
layout(set = 0, binding = 0) writeonly buffer Y { uint y[]; };
layout(set = 0, binding = 1) readonly buffer X { float x[]; };
layout(set = 0, binding = 2) buffer F { uint flag[]; }; // [batch][rows]
layout(push_constant) uniform P {
    uint batch;
    uint rows;
    uint k;
    uint pieces; // six 2-bit piece indices, segment 0 lowest
} p;

const uint TILE = 64u;
const uint STRIDE = TILE + 1u; // one word of padding per row
shared uint hi_mid[TILE * STRIDE]; // hi's bits | mid's bits << 16
shared uint lo[TILE * STRIDE];

// The upper 16 bits of f32 bits u rounded to nearest even (u finite).
uint round16(uint u) { return (u + 0x7fffu + ((u >> 16) & 1u)) >> 16; }

// x's three pieces (see above), each as bf16 bits in the low half.
uvec3 pieces(float v) {
    uint u = floatBitsToUint(v);
    if ((u & 0x7f800000u) == 0x7f800000u) {
        // Inf or NaN whole into hi; a NaN keeps a set quiet bit so its upper half stays a NaN.
        uint nan = (u & 0x7fffffu) != 0u ? 0x40u : 0u;
        return uvec3((u >> 16) | nan, 0u, 0u);
    }
    uint h = round16(u);
    if ((h & 0x7f80u) == 0x7f80u) {
        h = u >> 16; // rounding up would give inf: truncate instead
    }
    precise float r1 = v - uintBitsToFloat(h << 16);
    uint m = round16(floatBitsToUint(r1));
    precise float r2 = r1 - uintBitsToFloat(m << 16);
    return uvec3(h, m, floatBitsToUint(r2) >> 16);
}

void main() {
    uint tiles_r = (p.rows + TILE - 1u) / TILE;
    uint tiles_k = (p.k + TILE - 1u) / TILE;
    uint t = (gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (t >= p.batch * tiles_r * tiles_k) {
        return; // the grid's spare workgroups (uniform)
    }
    uint per = tiles_r * tiles_k;
    uint bz = t / per;
    uint r0 = (t % per / tiles_k) * TILE;
    uint k0 = (t % per % tiles_k) * TILE;
    uint lane = gl_LocalInvocationID.x % TILE;
    uint first = gl_LocalInvocationID.x / TILE; // 0..3
    uint x_base = bz * p.rows * p.k;
    for (uint j = 0u; j < TILE / 4u; j++) {
        uint o = first + 4u * j;
        // Along the contiguous axis: lane walks k (TRANS = 0) or rows (TRANS = 1).
        uint r = TRANS ? lane : o, kk = TRANS ? o : lane;
        uint gr = r0 + r, gk = k0 + kk;
        if (gr < p.rows && gk < p.k) {
            float v = TRANS ? x[x_base + gk * p.rows + gr] : x[x_base + gr * p.k + gk];
            uint e = (floatBitsToUint(v) >> 23) & 0xffu;
            if (e == 0xffu || (e != 0u && e < 24u)) {
                flag[bz * p.rows + gr] = 1u; // the same word from every writer
            }
            uvec3 c = pieces(v);
            hi_mid[r * STRIDE + kk] = c.x | (c.y << 16);
            lo[r * STRIDE + kk] = c.z;
        }
    }
    barrier();
    uint words = 3u * p.k; // words per output row
    uint y_base = bz * p.rows * words;
    uint w = gl_LocalInvocationID.x % (TILE / 2u);
    uint group = gl_LocalInvocationID.x / (TILE / 2u); // 0..7
    for (uint j = 0u; j < TILE * 6u / 8u; j++) {
        uint rs = group + 8u * j; // (row, segment) pairs of the tile
        uint r = rs / 6u, s = rs % 6u;
        uint gr = r0 + r, gk = k0 + 2u * w; // elements gk and gk + 1 (both in range: k is even)
        if (gr < p.rows && gk < p.k) {
            uint piece = (p.pieces >> (2u * s)) & 3u;
            uint i = r * STRIDE + 2u * w;
            uint e0 = piece == 2u ? lo[i] : (hi_mid[i] >> (piece << 4)) & 0xffffu;
            uint e1 = piece == 2u ? lo[i + 1u] : (hi_mid[i + 1u] >> (piece << 4)) & 0xffffu;
            y[y_base + gr * words + (s * p.k + gk) / 2u] = e0 | (e1 << 16);
        }
    }
}
