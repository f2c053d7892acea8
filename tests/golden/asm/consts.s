.const %a f32[2, 2] = [1.0, 2.0, 3.0]
.const %b i32[2] = [1, 2.5]
.const %c f16[1] = [70000]
.const %d f32[2] = rand(1, gaussian)
.const %e i32[4] = rand(3)
.const %f f32[2] = fill()
