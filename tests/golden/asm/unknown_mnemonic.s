.input %x f32[4, 8]
.const %w f32[8, 2] = zeros
.tensor %y f32[4, 2]
    ALLOC %y
    MATMLU %y, %x, %w
    FREE %y
    HALT
