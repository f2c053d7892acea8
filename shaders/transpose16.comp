#version 450
// y[b][c][r] = x[b][r][c]: the last two axes of `batch` matrices of rows x cols 16-bit elements
// swapped, raw bits, packed two a word (element 2k is the low half of word k). rows and cols are
// even, so every row starts on a whole word on both sides and an output word pairs two input
// rows. A workgroup moves a 64 x 64 tile through shared memory: its reads and its writes each
// take whole 32-word runs of a row.
// ops::rows::matmul_coopmat restages operands with it into the layout the cooperative-matrix
// GEMM reads fastest.

layout(local_size_x = 256) in;
layout(set = 0, binding = 0) writeonly buffer Y { uint y[]; };
layout(set = 0, binding = 1) readonly buffer X { uint x[]; };
layout(push_constant) uniform P {
    uint batch;
    uint rows;
    uint cols;
} p;

const uint TILE = 64u;                 // elements a side
const uint WORDS = TILE / 2u;          // words per tile row
const uint STRIDE = WORDS + 1u;        // one word of padding per row
shared uint tile[TILE * STRIDE];       // tile[r * STRIDE + w]: input row r0 + r, word c0 / 2 + w

void main() {
    uint tiles_r = (p.rows + TILE - 1u) / TILE;
    uint tiles_c = (p.cols + TILE - 1u) / TILE;
    uint t = (gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (t >= p.batch * tiles_r * tiles_c) {
        return; // the grid's spare workgroups (uniform)
    }
    uint per = tiles_r * tiles_c;
    uint r0 = (t % per / tiles_c) * TILE;
    uint c0 = (t % per % tiles_c) * TILE;
    uint in_words = p.cols / 2u;   // words per input row
    uint out_words = p.rows / 2u;  // words per output row
    uint base = t / per * p.rows * in_words; // both sides: the matrix's first word
    uint lane = gl_LocalInvocationID.x % WORDS;
    uint first = gl_LocalInvocationID.x / WORDS; // 0..7
    for (uint j = 0u; j < TILE / 8u; j++) {
        uint r = first + 8u * j;
        uint gr = r0 + r, gw = c0 / 2u + lane;
        if (gr < p.rows && gw < in_words) {
            tile[r * STRIDE + lane] = x[base + gr * in_words + gw];
        }
    }
    barrier();
    for (uint j = 0u; j < TILE / 8u; j++) {
        uint c = first + 8u * j;           // output row within the tile
        uint gc = c0 + c, gr = r0 + 2u * lane; // rows gr and gr + 1 (both in range: rows is even)
        if (gc < p.cols && gr < p.rows) {
            uint shift = (c & 1u) << 4;
            uint lo = (tile[2u * lane * STRIDE + c / 2u] >> shift) & 0xffffu;
            uint hi = (tile[(2u * lane + 1u) * STRIDE + c / 2u] >> shift) & 0xffffu;
            y[base + gc * out_words + gr / 2u] = lo | (hi << 16);
        }
    }
}
