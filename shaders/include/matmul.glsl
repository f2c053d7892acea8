// matmul.glsl -- the body of the strict MATMUL kernels (shaders/matmul.comp, matmul_gelu.comp):
// exec::cpu::reference::matmul, bit for bit.
//   y[batch, i, j] = act(add(acc, bias[broadcast]))  where
//   acc = +0; for k ascending: acc = strict_add(acc, strict_mul(op(a)[i, k], op(b)[k, j]))
// op(a) = a or a^T (ta), op(b) = b or b^T (tb); batch axes broadcast numpy-style (the launcher
// merges them and passes each operand's element stride per merged axis, 0 where it broadcasts).
// Tiling: a 16x16 workgroup computes a 64x64 output tile (4x4 per thread), staging k in chunks
// of 16 through shared memory. Each output keeps its own accumulator and sees k in ascending
// order, so the tiling changes speed, never bits.
// One dispatch covers k in [k_begin, k_begin + K_SPAN): the first starts each accumulator at +0,
// later ones resume from the partial sum the previous one stored in y (an f32 store and load
// keep its bits), and only the one reaching K adds the bias and applies the activation. This
// keeps every invocation far below lavapipe's 65535 loop iterations (see rowtree.glsl) for any K.
// Every workgroup computes exactly one tile: the launcher's grid covers batches * tiles.
// GELU (strict_gelu -> strict_erf, with its coefficient table) is compiled only into
// matmul_gelu (MATMUL_GELU defined): on lavapipe the table alone made every workgroup of the
// other activations several times slower.
#ifndef ADEADVM_MATMUL_GLSL
#define ADEADVM_MATMUL_GLSL
#include "matmul_common.glsl"

#define TM 64u
#define TN 64u
#define TK 16u

layout(local_size_x = 16, local_size_y = 16) in;
shared float As[TK][TM]; // As[kk][r] = op(a)[row0 + r, k0 + kk]
shared float Bs[TK][TN]; // Bs[kk][c] = op(b)[k0 + kk, col0 + c]

void main() {
    uint M = p.m, N = p.n, K = p.k;
    bool ta = (p.flags & 1u) != 0u, tb = (p.flags & 2u) != 0u;
    uint act = (p.flags >> 2) & 3u;
    bool has_bias = (p.flags & 16u) != 0u;
    uint tiles_m = M / TM + ((M % TM) != 0u ? 1u : 0u);
    uint tiles_n = N / TN + ((N % TN) != 0u ? 1u : 0u);
    uint batches = matmul_batches();
    uint tile = (gl_WorkGroupID.z * gl_NumWorkGroups.y + gl_WorkGroupID.y) * gl_NumWorkGroups.x + gl_WorkGroupID.x;
    if (tile >= batches * tiles_m * tiles_n) {
        return; // the grid's spare workgroups (uniform: before any barrier)
    }
    uint tx = tile % tiles_n;
    uint ty = (tile / tiles_n) % tiles_m;
    uint bz = tile / tiles_n / tiles_m;
    uint lx = gl_LocalInvocationID.x, ly = gl_LocalInvocationID.y;
    uint li = ly * 16u + lx;
    // (row, column) strides of op(a) as [m, k] and op(b) as [k, n] in the stored operands.
    uint a_rs = ta ? 1u : K, a_cs = ta ? M : 1u;
    uint b_rs = tb ? 1u : N, b_cs = tb ? K : 1u;
    uint aoff, boff, coff;
    matmul_batch_offsets(bz, aoff, boff, coff);
    uint yoff = bz * M * N;
    uint row0 = ty * TM, col0 = tx * TN;
    uint k_end = (K - p.k_begin) > K_SPAN ? p.k_begin + K_SPAN : K;
    bool last = k_end == K;

    float acc[4][4];
    for (uint i = 0u; i < 4u; i++) {
        uint r = row0 + ly + 16u * i;
        for (uint j = 0u; j < 4u; j++) {
            uint c = col0 + lx + 16u * j;
            acc[i][j] = (p.k_begin != 0u && r < M && c < N) ? y[yoff + r * N + c] : 0.0;
        }
    }
    for (uint k0 = p.k_begin; k0 < k_end; k0 += TK) {
        uint kc = (k_end - k0) < TK ? (k_end - k0) : TK;
        // Stage the chunk; threads walk the operand's contiguous direction.
        for (uint q = 0u; q < 4u; q++) {
            uint idx = li + q * 256u;
            uint r = ta ? idx % TM : idx / TK;
            uint kk = ta ? idx / TM : idx % TK;
            uint gr = row0 + r, gk = k0 + kk;
            As[kk][r] = (gr < M && gk < k_end) ? a[aoff + gr * a_rs + gk * a_cs] : 0.0;
            uint c = tb ? idx / TK : idx % TN;
            uint kb = tb ? idx % TK : idx / TN;
            uint gc = col0 + c, gkb = k0 + kb;
            Bs[kb][c] = (gc < N && gkb < k_end) ? b[boff + gkb * b_rs + gc * b_cs] : 0.0;
        }
        memoryBarrierShared();
        barrier();
        for (uint kk = 0u; kk < kc; kk++) {
            float av[4], bv[4];
            for (uint i = 0u; i < 4u; i++) {
                av[i] = As[kk][ly + 16u * i];
                bv[i] = Bs[kk][lx + 16u * i];
            }
            for (uint i = 0u; i < 4u; i++) {
                for (uint j = 0u; j < 4u; j++) {
                    acc[i][j] = strict_add(acc[i][j], strict_mul(av[i], bv[j]));
                }
            }
        }
        memoryBarrierShared();
        barrier();
    }
    for (uint i = 0u; i < 4u; i++) {
        uint r = row0 + ly + 16u * i;
        for (uint j = 0u; j < 4u; j++) {
            uint c = col0 + lx + 16u * j;
            if (r < M && c < N) {
                float v = acc[i][j];
                if (last) {
                    if (has_bias) {
                        v = strict_add(v, bias[coff + r * p.bias_sm + c * p.bias_sn]);
                    }
                    v = activate(act, v);
                }
                y[yoff + r * N + c] = v;
            }
        }
    }
}

#endif // ADEADVM_MATMUL_GLSL
