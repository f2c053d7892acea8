#version 450
// ARGMAX: y[r] = the index of the largest of the n f32 words of row r of x (the VM widens
// 16-bit sources to f32 first, exactly). One workgroup a row (rows past the dispatch's
// workgroups loop): each thread keeps the best (key, index) of the elements it strides over,
// then a tree in shared memory keeps the larger key, the lower index on equal keys. The key
// is an integer image of the order `reference::argmax` uses, made from the bits alone (no
// float comparison, so a device that flushes denormals or not gives the same answer):
// zeros and denormals (either sign) are 0, NaN is above +inf, other values are ordered by
// magnitude with the sign. So ties go to the lowest index and the first NaN wins. The
// launcher writes -1 for empty rows with FILL's kernel instead.
layout(local_size_x = 256) in;
layout(set = 0, binding = 0) writeonly buffer Y { int y[]; };
layout(set = 0, binding = 1) readonly buffer X { uint x[]; };
layout(push_constant) uniform P {
    uint rows;
    uint n;
} p;

shared int s_key[256];
shared uint s_idx[256];

int order_key(uint b) {
    uint a = b & 0x7fffffffu;
    if (a > 0x7f800000u) return 0x7fffffff; // NaN: above +inf (0x7f800000)
    if (a < 0x00800000u) return 0;          // a zero or a denormal: a zero
    return (b >> 31) != 0u ? -int(a) : int(a);
}

void main() {
    uint lid = gl_LocalInvocationID.x;
    for (uint r = gl_WorkGroupID.x; r < p.rows; r += gl_NumWorkGroups.x) {
        // Below every real key (the least is -inf's, -0x7f800000).
        int best = int(0x80000000u);
        uint at = 0xffffffffu;
        uint base = r * p.n;
        for (uint i = lid; i < p.n; i += 256u) {
            int k = order_key(x[base + i]);
            if (k > best) {
                best = k;
                at = i;
            }
        }
        s_key[lid] = best;
        s_idx[lid] = at;
        barrier();
        for (uint half_ = 128u; half_ > 0u; half_ >>= 1) {
            if (lid < half_) {
                int k = s_key[lid + half_];
                uint i = s_idx[lid + half_];
                if (k > s_key[lid] || (k == s_key[lid] && i < s_idx[lid])) {
                    s_key[lid] = k;
                    s_idx[lid] = i;
                }
            }
            barrier();
        }
        if (lid == 0u) {
            y[r] = int(s_idx[0]);
        }
        // The next row overwrites the shared arrays only after thread 0 has read them.
        barrier();
    }
}
