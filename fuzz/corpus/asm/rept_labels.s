.define N 4
.dim B
.input %x f32[B, ${N}]
.const %c f32[2, ${N}] = [1.0, -2.0, 0x7fc00000, inf, -0.0, 1e-40, 3.5, -inf]
.output y f32[B, ${N}]
    ALLOC %t: f32[B, ${N}]
    COPY %t, %x
    ISET r0, 3
loop:
.rept i 2
    ADD %t, %t, 0.5
    MUL@cpu %t, %t, %x
.endr
    IADDI r0, r0, -1
    JNZ r0, loop
    SOFTMAX %t, %t, scale=0.25
    STORE y, %t
    FREE %t
    HALT
