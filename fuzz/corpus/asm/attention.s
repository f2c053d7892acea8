; attention.s — one multi-head softmax self-attention block.
;
; Computes, for each batch b:
;   q = x @ wq,  k = x @ wk,  v = x @ wv                      [T, D] each
;   split into H heads of HD = D / H columns:  [H, T, HD]     (RESHAPE + TRANSPOSE)
;   p = softmax(q @ k^T / sqrt(HD) + mask)                    [H, T, T], per head
;   o = p @ v, heads merged back to [T, D];  y = o @ wo
; Inputs:    x     f32[B, T, 64]   B (batch) and T (sequence length) are symbolic
;            mask  f32[T, T]       additive mask: 0 where a query may attend to a key, a large
;                                  negative number (e.g. -1e9, or -inf) where it may not
; Output:    y     f32[B, T, 64]
; Weights are random normal constants scaled by 1/sqrt(D) (0.125) at run time.

.tier strict
.define D 64
.define H 4
.define HD 16
.dim B, T
.input %x f32[B, T, D]
.input %mask f32[T, T]
.const %wq f32[D, D] = rand(11, normal)
.const %wk f32[D, D] = rand(12, normal)
.const %wv f32[D, D] = rand(13, normal)
.const %wo f32[D, D] = rand(14, normal)
.output y f32[B, T, D]

    ; the input scaled by 1/sqrt(D), so that x @ w has entries of order 1
    ALLOC %xs: f32[B, T, D]
    MUL %xs, %x, 0.125

    ; projections, each split into heads: [B, T, D] -> [B, T, H, HD] -> [B, H, T, HD]
    ALLOC %q: f32[B, T, D]
    MATMUL %q, %xs, %wq
    ALLOC %q4: f32[B, T, H, HD]
    RESHAPE %q4, %q
    FREE %q
    ALLOC %qh: f32[B, H, T, HD]
    TRANSPOSE %qh, %q4, [0, 2, 1, 3]
    FREE %q4

    ALLOC %k: f32[B, T, D]
    MATMUL %k, %xs, %wk
    ALLOC %k4: f32[B, T, H, HD]
    RESHAPE %k4, %k
    FREE %k
    ALLOC %kh: f32[B, H, T, HD]
    TRANSPOSE %kh, %k4, [0, 2, 1, 3]
    FREE %k4

    ALLOC %v: f32[B, T, D]
    MATMUL %v, %xs, %wv
    FREE %xs
    ALLOC %v4: f32[B, T, H, HD]
    RESHAPE %v4, %v
    FREE %v
    ALLOC %vh: f32[B, H, T, HD]
    TRANSPOSE %vh, %v4, [0, 2, 1, 3]
    FREE %v4

    ; scores and attention weights: [B, H, T, T]; the mask broadcasts over B and H
    ALLOC %s: f32[B, H, T, T]
    MATMUL %s, %qh, %kh, tb
    FREE %qh
    FREE %kh
    ALLOC %p: f32[B, H, T, T]
    SOFTMAX %p, %s, mask=%mask, scale=0.25      ; 1/sqrt(HD)
    FREE %s

    ; weighted values, heads merged: [B, H, T, HD] -> [B, T, H, HD] -> [B, T, D]
    ALLOC %o: f32[B, H, T, HD]
    MATMUL %o, %p, %vh
    FREE %p
    FREE %vh
    ALLOC %ot: f32[B, T, H, HD]
    TRANSPOSE %ot, %o, [0, 2, 1, 3]
    FREE %o
    ALLOC %oc: f32[B, T, D]
    RESHAPE %oc, %ot
    FREE %ot
    ALLOC %ocs: f32[B, T, D]
    MUL %ocs, %oc, 0.125
    FREE %oc

    ; output projection
    ALLOC %out: f32[B, T, D]
    MATMUL %out, %ocs, %wo
    FREE %ocs
    STORE y, %out
    FREE %out
    HALT
