; loop.s — a stack of L dense layers run by a loop instead of unrolled code.
;
; Computes   h_0 = x
;            h_{l+1} = relu(h_l @ w_l + b_l) / sqrt(D)      for l = 0 .. L-1
;            y = h_L
; Input:     x  f32[B, 32]    B is symbolic
; Output:    y  f32[B, 32]
; The per-layer weights are declared with .rept as consecutive constants %w0..%w3 and
; %b0..%b3; inside the loop, `LOAD %w, %w0, index=r1, count=L` copies constant w_{r1}.
; Registers: r1 = layer index, r2 = layers left. Change the depth with `-D L=8`.

.tier strict
.define L 4
.define D 32
.dim B
.input %x f32[B, D]
.output y f32[B, D]
.rept i ${L}
.const %w${i} f32[D, D] = rand(${i}, normal)
.endr
.rept i ${L}
.const %b${i} f32[D] = fill(0.0${i})
.endr

    ALLOC %h: f32[B, D]
    COPY %h, %x
    ALLOC %w: f32[D, D]
    ALLOC %b: f32[D]
    ALLOC %t: f32[B, D]
    ISET r1, 0
    ISET r2, ${L}
layer:
    LOAD %w, %w0, index=r1, count=${L}
    LOAD %b, %b0, index=r1, count=${L}
    MATMUL %t, %h, %w, bias=%b, act=relu
    MUL %h, %t, 0.17677669              ; 1/sqrt(32)
    IADDI r1, r1, 1
    IADDI r2, r2, -1
    JNZ r2, layer
    STORE y, %h
    FREE %t
    FREE %b
    FREE %w
    FREE %h
    HALT
