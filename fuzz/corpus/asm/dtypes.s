.tier strict
.input %i i32[3]
.input %h f16[2, 3]
.const %table bf16[4, 3] = rand(5, normal)
.const %z i32[3] = zeros
.output g bf16[3, 3]
.output c f16[2, 3]
    ALLOC %g: bf16[3, 3]
    GATHER %g, %table, %i
    STORE g, %g
    FREE %g
    ALLOC %c: f16[2, 3]
    CAST %c, %h
    TANH@gpu %c, %c
    STORE c, %c
    FREE %c
