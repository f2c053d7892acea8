; operands of the wrong kind
.input %x f32[4]
.input %w f32[4, 4]
.tensor %y f32[4]
    ALLOC %y
    MATMUL %y, %x, 1.5          ; a scalar where a tensor goes
    ADD %y, %x, foo             ; ADD takes a tensor or an f32 immediate
    ISET %y, 3
    RELU %y, %x, act=relu
    MATMUL %y, %x, %w, act=tanh
    FREE %y
