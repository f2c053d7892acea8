; ffn.s — a pre-norm transformer feed-forward block with a residual connection.
;
; Computes   n = layernorm(x) * gamma + beta                 (over the last axis, eps 1e-5)
;            h = gelu((n @ w1) / sqrt(D) + b1)               [N, FF]
;            y = x + (h @ w2) / sqrt(FF)                      [N, D]
; Input:     x  f32[N, 256]   N tokens (symbolic)
; Output:    y  f32[N, 256]
; D and FF can be changed on the command line: `adeadvm asm ffn.s -D D=512 -D FF=2048`
; (then change the scale immediates too: 1/sqrt(D) and 1/sqrt(FF)).

.tier strict
.define D 256
.define FF 1024
.dim N
.input %x f32[N, D]
.const %gamma f32[D] = ones
.const %beta f32[D] = zeros
.const %w1 f32[D, FF] = rand(21, normal)
.const %b1 f32[FF] = fill(0.02)
.const %w2 f32[FF, D] = rand(22, normal)
.output y f32[N, D]

    ALLOC %n: f32[N, D]
    LAYERNORM %n, %x, gamma=%gamma, beta=%beta
    ALLOC %h: f32[N, FF]
    MATMUL %h, %n, %w1
    FREE %n
    ALLOC %hs: f32[N, FF]
    MUL %hs, %h, 0.0625                 ; 1/sqrt(256)
    FREE %h
    ALLOC %hb: f32[N, FF]
    ADD %hb, %hs, %b1
    FREE %hs
    ALLOC %g: f32[N, FF]
    GELU %g, %hb
    FREE %hb
    ALLOC %o: f32[N, D]
    MATMUL %o, %g, %w2
    FREE %g
    ALLOC %os: f32[N, D]
    MUL %os, %o, 0.03125                ; 1/sqrt(1024)
    FREE %o
    ALLOC %out: f32[N, D]
    ADD %out, %x, %os                   ; residual
    FREE %os
    STORE y, %out
    FREE %out
    HALT
