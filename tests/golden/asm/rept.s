; three layers, but only two weight constants exist
.rept i 2
.const %w${i} f32[4, 4] = zeros
.endr
.input %x f32[4, 4]
.tensor %y f32[4, 4]
    ALLOC %y
.rept i 3
    MATMUL %y, %x, %w${i}
.endr
    FREE %y
.endr
.rept j 2
    NOP
