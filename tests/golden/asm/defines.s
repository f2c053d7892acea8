.define WIDTH 64
.input %x f32[WIDTH]
.input %y f32[${WIDHT}]
.const %w f32[${WIDTH}] = npy("${WEIGHTS}/w.npy")
.define WIDTH 32
.input %z f32[${WIDTH
