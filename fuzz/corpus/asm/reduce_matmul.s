.input %a f32[2, 3, 4]
.const %w f32[4, 5] = rand(2)
.const %b f32[5] = fill(0.25)
.output r f32[2, 3]
.output m f32[2, 3, 5]
    ALLOC %m: f32[2, 3, 5]
    MATMUL %m, %a, %w, bias=%b, act=gelu
    STORE m, %m
    FREE %m
    ALLOC %r: f32[2, 3]
    REDUCE_MEAN %r, %a, -1
    STORE r, %r
    FREE %r
