#version 450
// dst[i, :] = the values of row indices[i] of a block-quantized [rows, K] table (GATHER; K a
// multiple of 32, rows of K / 32 ggml blocks, isa::BlockFormat): numerics::quant's values
// (shaders/include/matmul_q.glsl says how they are exact). Invocation t checks index t
// (t < count) and writes value t of the output (t < count * K); an index outside 0..rows is
// never dereferenced, and its position goes into status[slot] with atomicMin, as
// shaders/gather.comp does (ops::data::gather_blocks, the VM's bounds report).
#extension GL_GOOGLE_include_directive : require
layout(local_size_x = 256) in;
layout(set = 0, binding = 0) writeonly buffer Y { float y[]; };
layout(set = 0, binding = 1) readonly buffer T { uint bw[]; };
layout(set = 0, binding = 2) readonly buffer I { int indices[]; };
layout(set = 0, binding = 3) buffer S { uint status[]; };
layout(constant_id = 0) const uint FORMAT = 0u; // 0 Q8_0, 1 Q4_1
layout(push_constant) uniform P {
    uint total; // count * k
    uint count;
    uint rows;
    uint k;     // values a row
    uint slot;
} p;
const uint QK = 32u;
const uint BLOCK_BYTES = FORMAT == 0u ? 34u : 20u;

// q_f16 and the word reader of shaders/include/matmul_q.glsl (not included: it declares
// MATMUL's bindings).
float q_f16(uint h) {
    uint sign = (h & 0x8000u) << 16;
    uint e = (h >> 10) & 0x1fu;
    uint m = h & 0x3ffu;
    if (e == 31u) {
        return uintBitsToFloat(sign | (m == 0u ? 0x7f800000u : (0x7fc00000u | (m << 13))));
    }
    if (e == 0u) {
        if (m == 0u) {
            return uintBitsToFloat(sign);
        }
        uint p = uint(findMSB(m));
        return uintBitsToFloat(sign | ((p + 103u) << 23) | ((m << (23u - p)) & 0x007fffffu));
    }
    return uintBitsToFloat(sign | ((e + 112u) << 23) | (m << 13));
}
uint byte_at(uint o) { return (bw[o >> 2] >> ((o & 3u) << 3)) & 0xffu; }
uint half_at(uint o) { return byte_at(o) | (byte_at(o + 1u) << 8); }

bool ok(int ix) { return ix >= 0 && uint(ix) < p.rows; }

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint items = p.total > p.count ? p.total : p.count;
    uint row_bytes = (p.k / QK) * BLOCK_BYTES;
    for (uint t = gl_GlobalInvocationID.x; t < items; t += stride) {
        if (t < p.count && !ok(indices[t])) {
            atomicMin(status[p.slot], t);
        }
        if (t < p.total) {
            uint pos = t / p.k;
            uint col = t - pos * p.k;
            int ix = indices[pos];
            if (ok(ix)) {
                uint o = uint(ix) * row_bytes + (col / QK) * BLOCK_BYTES;
                uint e = col % QK;
                float d = q_f16(half_at(o));
                if (FORMAT == 0u) {
                    int q = int(byte_at(o + 2u + e) << 24) >> 24;
                    precise float v = d * float(q);
                    y[t] = v;
                } else {
                    float m = q_f16(half_at(o + 2u));
                    uint q = (byte_at(o + 4u + e % 16u) >> (e < 16u ? 0u : 4u)) & 0x0fu;
                    precise float dq = d * float(q);
                    precise float v = dq + m;
                    y[t] = v;
                }
            }
        }
    }
}
