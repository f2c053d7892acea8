; peak.s — runs one of the ceiling kernels of benches/peak three times: `-D K=ffma`, `muladd`
; or `mma`, G workgroups, IT iterations of the kernel's loop. benches/peak.py turns the
; KERNEL row of `adeadvm run --profile` into TFLOP/s. Fast tier (KERNEL runs user SPIR-V).
.tier fast
.define G 2112
.define IT 1000
.define N 4325376
.tensor %y f32[N]
.output y f32[16]
.spirv s = file("${K}.spv")
.kernel k = s "main" bindings(%y) push(f32 1.0, f32 0.0, u32 ${IT}) groups(${G}, 1, 1)

    ALLOC %y
    KERNEL k
    KERNEL k
    KERNEL k
    GPU_SYNC
    ALLOC %s: f32[16]
    SLICE %s, %y, 0, 0
    STORE y, %s
    FREE %s
    FREE %y
    HALT
