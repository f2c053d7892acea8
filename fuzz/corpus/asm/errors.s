.input %x f32[4]
.output y f32[4]
    ALLOC %t: f32[4]
    MATMLU %t, %x, %x
    RELU %t, %nope
    JMP nowhere
    TRANSPOSE %t, %x, perm=[1, 0]
    STORE y, %t
