; MATMUL with N = 0 plus bias and act (issue 34: a division by zero in the CPU epilogue)
.const %a f32[3, 4] = fill(1.5)
.const %b f32[4, 0] = fill(2.0)
.const %bias f32[0] = fill(1.0)
.output y f32[3, 0]
    ALLOC %p: f32[3, 0]
    MATMUL %p, %a, %b, bias=%bias, act=gelu
    STORE y, %p
    FREE %p
    HALT
