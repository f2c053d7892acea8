#version 450
// SCATTER: row i of x (rows of `row` 32-bit words) replaces row indices[i] of y, which has
// `rows` rows; `count` source rows. One workgroup a source row (rows past the dispatch's
// workgroups loop). Its threads read every index: a row is written only when no index at all
// is outside 0..rows (the CPU reference checks them all before writing anything) and no later
// position names the same destination row (the highest i wins, as if the rows were written in
// order), so every destination word has at most one writer and the result does not depend on
// scheduling. O(count^2) index reads: the decoders' row counts are small. Every workgroup
// finds the first bad position (the CPU's error); workgroup 0 (the one of row 0) writes it
// into status[slot] and its index into status[value_slot], so after the batch the slot holds
// it or stays 0xFFFFFFFF, as GATHER's do, and the VM can name the value even when the indices
// were computed on the device.
layout(local_size_x = 256) in;
layout(set = 0, binding = 0) writeonly buffer Y { uint y[]; };
layout(set = 0, binding = 1) readonly buffer X { uint x[]; };
layout(set = 0, binding = 2) readonly buffer I { int indices[]; };
layout(set = 0, binding = 3) buffer S { uint status[]; };
layout(push_constant) uniform P {
    uint count;
    uint rows;
    uint row; // words a row
    uint slot;
    uint value_slot;
} p;

shared uint s_skip;
shared uint s_bad;

bool ok(int ix) { return ix >= 0 && uint(ix) < p.rows; }

void main() {
    uint lid = gl_LocalInvocationID.x;
    for (uint i = gl_WorkGroupID.x; i < p.count; i += gl_NumWorkGroups.x) {
        if (lid == 0u) {
            s_skip = 0u;
            s_bad = 0xffffffffu;
        }
        barrier();
        int ix = indices[i];
        bool skip = false;
        for (uint j = lid; j < p.count; j += 256u) {
            int v = indices[j];
            if (!ok(v)) {
                atomicMin(s_bad, j);
            }
            skip = skip || (j > i && v == ix);
        }
        if (skip) {
            atomicOr(s_skip, 1u);
        }
        barrier();
        if (i == 0u && lid == 0u && s_bad != 0xffffffffu) {
            status[p.slot] = s_bad;
            status[p.value_slot] = uint(indices[s_bad]);
        }
        if (s_skip == 0u && s_bad == 0xffffffffu) {
            uint d = uint(ix) * p.row;
            uint s = i * p.row;
            for (uint c = lid; c < p.row; c += 256u) {
                y[d + c] = x[s + c];
            }
        }
        // The next row resets s_skip only after every thread has read it.
        barrier();
    }
}
