; a missing -D: an unknown define is reported at its first use only, and the uses of the
; tensors whose declarations failed are not reported again; other errors still are
.input %x f32[4]
.const %w f32[4] = npy("${WEIGHTS}/w.npy")
.rept i 2
.const %b${i} f32[4] = npy("${WEIGHTS}/b${i}.npy")
.endr
.const %s f32[4] = fill(two)
.output y f32[4]
    ALLOC %t: f32[4]
    MUL %t, %x, %w
    ADD %t, %t, %b1
    ADD %t, %t, %s
    ADD %t, %t, %q
    STORE y, %t
    FREE %t
