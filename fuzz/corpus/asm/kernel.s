; kernel.s — dispatching a user SPIR-V compute kernel (fast tier).
;
; Computes   y = 2 * x, elementwise, with the GLSL kernel in kernel/scale.comp
;            (compiled to kernel/scale.spv with glslc).
; Input:     x  f32[1024]
; Output:    y  f32[1024]
; The kernel binds x at binding 0 and y at binding 1, takes push constants
; (f32 scale, u32 n), and runs 16 workgroups of 64 invocations. KERNEL is a fast-tier
; opcode that runs on the Vulkan executor, so the program declares `.tier fast`.

.tier fast
.define N 1024
.input %x f32[N]
.tensor %y f32[N]
.output y f32[N]
.spirv scale = file("kernel/scale.spv")
.kernel scale_by_2 = scale "main" bindings(%x, %y) push(f32 2.0, u32 ${N}) groups(16, 1, 1)

    ALLOC %y
    KERNEL scale_by_2
    GPU_SYNC
    STORE y, %y
    FREE %y
    HALT
