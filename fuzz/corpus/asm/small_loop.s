
.input %x f32[8, 8]
.const %w f32[8, 8] = rand(1, normal)
.const %m f32[8] = [0.0, -1e9, 0.0, 0.0, -1e9, 0.0, 0.0, 0.0]
.output y f32[8, 8]
    ALLOC %h: f32[8, 8]
    ALLOC %g: f32[8, 8]
    COPY %h, %x
    ISET r0, 2
top:
    MATMUL %g, %h, %w, bias=%m, act=relu
    LAYERNORM %h, %g, eps=1e-5
    SOFTMAX %g, %h, mask=%m, scale=0.5
    IADDI r0, r0, -1
    JNZ r0, top
    TRANSPOSE %g, %h, [1, 0]
    STORE y, %g
    FREE %h
    FREE %g
    HALT
