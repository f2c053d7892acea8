.input %x f32[4]
.tensor %y f32[4]
    ALLOC %y
    MATMUL %y, %x
    RELU %y, %x, %x
    HALT now
    SOFTMAX %y, %x, scale
    SOFTMAX %y, %x, scale=2.0, scale=3.0
