#version 450
// MATMUL of at most 8 rows of a (a language model's decode step) by a block-quantized b ([N, K],
// `tb`): see shaders/include/matmul_q.glsl for the values and the arithmetic.
//
// A workgroup of 64 threads computes 64 columns of the output for all ROWS rows: thread c owns
// column col0 + c (row col0 + c of b) and ROWS accumulators, lanes of two vec4s (rows 0-3, 4-7),
// so each weight block is read from memory once for all the rows. k is taken CB blocks at a
// time: the workgroup copies the chunk's bytes of its 64 rows of b into shared memory (each
// row's bytes are contiguous: consecutive threads read consecutive words) and a's ROWS x 32*CB
// values, transposed so that one vec4 holds k's value for four rows; then each thread walks its
// row's blocks, k ascending, four values at a time.
#extension GL_GOOGLE_include_directive : require
#include "matmul_q.glsl"

// The rows of a (M, 1 to 8): rows past 4 take the second vec4 of accumulators.
layout(constant_id = 2) const uint ROWS = 1u;
layout(local_size_x = 64) in;
const uint WG = 64u;
const uint CB = 8u;          // blocks of k a chunk
const uint CK = CB * QK;     // k a chunk
const uint LANES = ROWS > 4u ? 8u : 4u;
// Words of one row's chunk of b in shared memory: CB blocks from any 2-byte alignment, and one
// more so that the stride is odd (the threads of a warp read their own rows: distinct banks).
const uint SW = (CB * 34u + 2u + 3u) / 4u + 2u;

shared vec4 A_lo[CK]; // A_lo[kk][r] = a's row r (0-3) at k0 + kk, flushed
shared vec4 A_hi[CK]; // rows 4-7
shared uint Bs[WG * SW];
shared uint tiny_chunk;

float a_at(uint aoff, uint r, uint k) {
    bool ta = (p.flags & 1u) != 0u;
    return a[aoff + (ta ? k * p.m + r : r * p.k + k)];
}

void main() {
    uint M = p.m, N = p.n, K = p.k;
    uint act = (p.flags >> 2) & 3u;
    bool has_bias = (p.flags & 16u) != 0u;
    uint tiles_n = (N + WG - 1u) / WG;
    uint tile = (gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (tile >= matmul_batches() * tiles_n) {
        return; // the grid's spare workgroups (uniform: before any barrier)
    }
    uint bz = tile / tiles_n;
    uint col0 = (tile % tiles_n) * WG;
    uint aoff, boff, coff;
    matmul_batch_offsets(bz, aoff, boff, coff);
    uint yoff = bz * M * N;
    uint t = gl_LocalInvocationID.x;
    uint j = col0 + t;
    uint row_bytes = (K / QK) * BLOCK_BYTES;
    uint k_end = (K - p.k_begin) > K_SPAN ? p.k_begin + K_SPAN : K;
    bool last = k_end == K;

    vec4 acc_lo = vec4(0.0), acc_hi = vec4(0.0);
    if (p.k_begin > 0u && j < N) {
        for (uint r = 0u; r < ROWS; r++) {
            float v = y[yoff + r * N + j];
            if (r < 4u) acc_lo[r] = v; else acc_hi[r - 4u] = v;
        }
    }
    if (t == 0u) {
        tiny_chunk = 0u;
    }
    uint chunk = 0u;
    for (uint k0 = p.k_begin; k0 < k_end; k0 += CK) {
        uint ck = min(CK, k_end - k0);
        uint cb = ck / QK;
        memoryBarrierShared();
        barrier(); // the previous chunk is read by every thread (and tiny_chunk initialized)
        // a: LANES x CK values, k fastest (coalesced when a is stored [M, K]).
        bool tiny = false;
        for (uint i = t; i < LANES * CK; i += WG) {
            uint r = i / CK, kk = i % CK;
            float v = (r < ROWS && kk < ck) ? q_stage(a_at(aoff, r, k0 + kk), tiny) : 0.0;
            if (r < 4u) A_lo[kk][r] = v; else A_hi[kk][r - 4u] = v;
        }
        if (tiny) {
            atomicMax(tiny_chunk, chunk + 1u);
        }
        // b: the chunk's bytes of each of the workgroup's rows, from the word holding its first.
        for (uint i = t; i < WG * SW; i += WG) {
            uint c = i / SW, wi = i % SW;
            uint start = (col0 + c) * row_bytes + (k0 / QK) * BLOCK_BYTES;
            uint words = ((start + cb * BLOCK_BYTES + 3u) >> 2) - (start >> 2);
            Bs[i] = (col0 + c < N && wi < words) ? bw[(start >> 2) + wi] : 0u;
        }
        memoryBarrierShared();
        barrier();
        bool careful = tiny_chunk == chunk + 1u;
        uint base = t * SW;
        uint o = ((j * row_bytes + (k0 / QK) * BLOCK_BYTES) & 3u); // this row's first byte in Bs
        for (uint blk = 0u; blk < cb; blk++, o += BLOCK_BYTES) {
            uint head = Q_WORD_AT(Bs, base, o);
            float d = q_f16(head & 0xffffu);
            float mn = q_f16(head >> 16); // Q4_1's m (unused for Q8_0)
            uint kb = blk * QK;
            for (uint g = 0u; g < 8u; g++) {
                vec4 vals;
                if (FORMAT == 0u) {
                    uint q = Q_WORD_AT(Bs, base, o + 2u + 4u * g);
                    vals = q8_values(d, q);
                } else {
                    uint q = Q_WORD_AT(Bs, base, o + 4u + 4u * (g & 3u));
                    vals = q4_values(d, mn, g < 4u ? q : q >> 4);
                }
                uint kk = kb + 4u * g;
                Q_MAC(acc_lo, A_lo[kk], vec4(vals.x), careful)
                Q_MAC(acc_lo, A_lo[kk + 1u], vec4(vals.y), careful)
                Q_MAC(acc_lo, A_lo[kk + 2u], vec4(vals.z), careful)
                Q_MAC(acc_lo, A_lo[kk + 3u], vec4(vals.w), careful)
                if (ROWS > 4u) {
                    Q_MAC(acc_hi, A_hi[kk], vec4(vals.x), careful)
                    Q_MAC(acc_hi, A_hi[kk + 1u], vec4(vals.y), careful)
                    Q_MAC(acc_hi, A_hi[kk + 2u], vec4(vals.z), careful)
                    Q_MAC(acc_hi, A_hi[kk + 3u], vec4(vals.w), careful)
                }
            }
        }
        chunk++;
    }

    if (j >= N) {
        return;
    }
    for (uint r = 0u; r < ROWS && r < M; r++) {
        float v = r < 4u ? acc_lo[r] : acc_hi[r - 4u];
        y[yoff + r * N + j] = last ? q_finish(v, r, j, has_bias, act, coff) : v;
    }
}
