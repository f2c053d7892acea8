.input %x f32[4, 4]
.tensor %y f32[4, 4]
    ALLOC %y
    ADD %y, %x, 1e39
    ISET r16, 1
    ISET r1, 3000000000
    REDUCE_SUM %y, %x, 9
    TRANSPOSE %y, %x, [0, 0]
    FILL %y, 12abc
    FREE %y
