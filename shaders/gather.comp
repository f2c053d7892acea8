#version 450
// dst[i, :] = table[indices[i], :] with rows of `row` 32-bit words (GATHER). Invocation t checks
// index t (t < count) and copies word t of the output (t < count * row). An index outside
// 0..rows is never dereferenced: its position goes into status[slot] with atomicMin, so after
// the batch the slot holds the first bad position (as the CPU reference reports it) or stays
// 0xFFFFFFFF, the value the VM fills it with. Rows with a bad index are left unwritten.
// Under VEC4 (a specialization constant, set where rows are whole vec4s) `row` and `total`
// count vec4s and each invocation copies four words (H100, 16384 rows of 768 words from a
// table of 50000: 1480 GB/s one word a thread).
layout(local_size_x = 256) in;
layout(set = 0, binding = 0) writeonly buffer Y { uint y[]; };
layout(set = 0, binding = 1) readonly buffer T { uint table[]; };
layout(set = 0, binding = 2) readonly buffer I { int indices[]; };
layout(set = 0, binding = 3) buffer S { uint status[]; };
layout(set = 0, binding = 0) writeonly buffer Y4 { uvec4 y4[]; };
layout(set = 0, binding = 1) readonly buffer T4 { uvec4 table4[]; };
layout(constant_id = 0) const bool VEC4 = false;
layout(push_constant) uniform P {
    uint total; // count * row
    uint count;
    uint rows;
    uint row;   // words a row (vec4s under VEC4, as total)
    uint slot;
} p;

bool ok(int ix) { return ix >= 0 && uint(ix) < p.rows; }

void main() {
    uint stride = gl_NumWorkGroups.x * gl_WorkGroupSize.x;
    uint items = p.total > p.count ? p.total : p.count;
    for (uint t = gl_GlobalInvocationID.x; t < items; t += stride) {
        if (t < p.count && !ok(indices[t])) {
            atomicMin(status[p.slot], t);
        }
        if (t < p.total) {
            uint pos = t / p.row;
            uint col = t - pos * p.row;
            int ix = indices[pos];
            if (ok(ix)) {
                if (VEC4) {
                    y4[t] = table4[uint(ix) * p.row + col];
                } else {
                    y[t] = table[uint(ix) * p.row + col];
                }
            }
        }
    }
}
