.input %x f32[4
.input x f32[4]
.const %w f32[2] [1.0, 2.0]
.file prog.s
    ADD@tpu %x, %x, %x
    ADD %x %x
.kernel k = nomod "main"
.spirv m = words(1, 2)
.kernel k = m main
