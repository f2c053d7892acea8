; Constant and kernel sources that are devices, not files: each is refused before it is read
; (issue 34, class 5: /dev/zero used to be read until memory ran out). A different device each,
; because one unreadable path is reported once.
.input %x f32[4]
.tensor %y f32[4]
.const %a f32[4] = npy("/dev/zero")
.const %b f32[4] = safetensors("/dev/urandom", "w")
.const %c f32[4] = gguf("/dev/full", "token_embd.weight")
.vocab gguf("/dev/random")
.spirv k = file("/dev/./zero")
.output y f32[4]
    ALLOC %y
    ADD %y, %x, %a
    STORE y, %y
    FREE %y
    HALT
