#version 450
// MATMUL of more than 8 rows of a (a prompt) by a block-quantized b ([N, K], `tb`): see
// shaders/include/matmul_q.glsl for the values and the arithmetic.
//
// A workgroup of 256 threads computes a 64 x 64 output tile, 4 x 4 outputs a thread (rows
// ty * 4 + e, columns tx * 4 + c). k is staged one block (32) at a time: a's 64 x 32 values
// (flushed) and b's 64 blocks, dequantized once into shared memory (each thread decodes 8
// values of one block), both transposed so that a step of k reads one vec4 of each.
#extension GL_GOOGLE_include_directive : require
#include "matmul_q.glsl"

layout(local_size_x = 256) in;
const uint BM = 64u;
const uint BN = 64u;
const uint SX = BM / 4u + 1u; // vec4s a staged k row (one of padding)

shared vec4 As[QK * SX]; // As[kk * SX + r / 4][r % 4] = a[row0 + r, k0 + kk]
shared vec4 Bs[QK * SX]; // Bs[kk * SX + c / 4][c % 4] = b[col0 + c, k0 + kk]
shared uint tiny_chunk;

void main() {
    uint M = p.m, N = p.n, K = p.k;
    bool ta = (p.flags & 1u) != 0u;
    uint act = (p.flags >> 2) & 3u;
    bool has_bias = (p.flags & 16u) != 0u;
    uint tiles_m = (M + BM - 1u) / BM;
    uint tiles_n = (N + BN - 1u) / BN;
    uint tile = (gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (tile >= matmul_batches() * tiles_m * tiles_n) {
        return; // the grid's spare workgroups (uniform: before any barrier)
    }
    uint bz = tile / (tiles_n * tiles_m);
    uint row0 = ((tile / tiles_n) % tiles_m) * BM;
    uint col0 = (tile % tiles_n) * BN;
    uint aoff, boff, coff;
    matmul_batch_offsets(bz, aoff, boff, coff);
    uint yoff = bz * M * N;
    uint t = gl_LocalInvocationID.x;
    uint tx = t % 16u, ty = t / 16u;
    uint row_bytes = (K / QK) * BLOCK_BYTES;
    uint k_end = (K - p.k_begin) > K_SPAN ? p.k_begin + K_SPAN : K;
    bool last = k_end == K;

    // acc[e]: row ty * 4 + e, columns tx * 4 .. + 3.
    vec4 acc0 = vec4(0.0), acc1 = vec4(0.0), acc2 = vec4(0.0), acc3 = vec4(0.0);
    if (p.k_begin > 0u) {
        for (uint e = 0u; e < 4u; e++) {
            uint r = row0 + ty * 4u + e;
            vec4 v = vec4(0.0);
            for (uint c = 0u; c < 4u; c++) {
                uint col = col0 + tx * 4u + c;
                if (r < M && col < N) v[c] = y[yoff + r * N + col];
            }
            if (e == 0u) acc0 = v; else if (e == 1u) acc1 = v; else if (e == 2u) acc2 = v; else acc3 = v;
        }
    }
    if (t == 0u) {
        tiny_chunk = 0u;
    }
    // The b values this thread decodes: row bc of the tile, values bp * 8 .. + 7 of the block.
    uint bc = t / 4u, bp = t % 4u;
    uint chunk = 0u;
    for (uint k0 = p.k_begin; k0 < k_end; k0 += QK) {
        memoryBarrierShared();
        barrier(); // the previous chunk is read by every thread (and tiny_chunk initialized)
        bool tiny = false;
        for (uint l = 0u; l < 8u; l++) {
            uint i = l * 256u + t;
            // k fastest where a is stored [M, K] (coalesced), else rows fastest.
            uint r = ta ? i % BM : i / QK, kk = ta ? i / BM : i % QK;
            uint gr = row0 + r;
            float v = 0.0;
            if (gr < M) {
                v = q_stage(a[aoff + (ta ? (k0 + kk) * M + gr : gr * K + k0 + kk)], tiny);
            }
            As[kk * SX + r / 4u][r % 4u] = v;
        }
        if (tiny) {
            atomicMax(tiny_chunk, chunk + 1u);
        }
        {
            uint j = col0 + bc;
            vec4 v0 = vec4(0.0), v1 = vec4(0.0);
            if (j < N) {
                uint o = j * row_bytes + (k0 / QK) * BLOCK_BYTES;
                uint head = Q_WORD_AT(bw, 0u, o);
                float d = q_f16(head & 0xffffu);
                if (FORMAT == 0u) {
                    v0 = q8_values(d, Q_WORD_AT(bw, 0u, o + 2u + 8u * bp));
                    v1 = q8_values(d, Q_WORD_AT(bw, 0u, o + 6u + 8u * bp));
                } else {
                    float mn = q_f16(head >> 16);
                    uint shift = bp >= 2u ? 4u : 0u;
                    uint q0 = Q_WORD_AT(bw, 0u, o + 4u + 8u * (bp & 1u));
                    uint q1 = Q_WORD_AT(bw, 0u, o + 8u + 8u * (bp & 1u));
                    v0 = q4_values(d, mn, q0 >> shift);
                    v1 = q4_values(d, mn, q1 >> shift);
                }
            }
            uint kk = bp * 8u;
            for (uint e = 0u; e < 4u; e++) {
                Bs[(kk + e) * SX + bc / 4u][bc % 4u] = v0[e];
                Bs[(kk + 4u + e) * SX + bc / 4u][bc % 4u] = v1[e];
            }
        }
        memoryBarrierShared();
        barrier();
        bool careful = tiny_chunk == chunk + 1u;
        uint kc = min(QK, k_end - k0);
        for (uint kk = 0u; kk < kc; kk++) {
            vec4 av = As[kk * SX + ty];
            vec4 bv = Bs[kk * SX + tx];
            Q_MAC(acc0, vec4(av.x), bv, careful)
            Q_MAC(acc1, vec4(av.y), bv, careful)
            Q_MAC(acc2, vec4(av.z), bv, careful)
            Q_MAC(acc3, vec4(av.w), bv, careful)
        }
        chunk++;
    }

    for (uint e = 0u; e < 4u; e++) {
        uint r = row0 + ty * 4u + e;
        if (r >= M) {
            continue;
        }
        vec4 v = e == 0u ? acc0 : e == 1u ? acc1 : e == 2u ? acc2 : acc3;
        for (uint c = 0u; c < 4u; c++) {
            uint col = col0 + tx * 4u + c;
            if (col < N) {
                y[yoff + r * N + col] = last ? q_finish(v[c], r, col, has_bias, act, coff) : v[c];
            }
        }
    }
}
