.const %w f32[2147483647, 2147483647, 2147483647] = rand(1)
.output y f32[1]
ALLOC %t: f32[1]
FILL %t, 1.0
STORE y, %t
FREE %t
