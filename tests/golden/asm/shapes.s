.dim B
.input %a f33[B, 4]
.const %b f32[B, 4] = zeros
.tensor %c f32[1, 2, 3, 4, 5, 6, 7, 8, 9]
.tensor %d f32[4294967296]
.input %e f32[4 5]
