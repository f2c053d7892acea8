#version 450
// y[at] = bits: TSET's one element, written on the device so the tensor stays there. The
// whole tensor is bound (a binding at the element's own offset would break the device's
// storage-buffer offset alignment) and the index is a push constant.
layout(local_size_x = 1) in;
layout(set = 0, binding = 0) writeonly buffer Y { uint y[]; };
layout(push_constant) uniform P {
    uint at;
    uint bits;
} p;

void main() {
    y[p.at] = p.bits;
}
