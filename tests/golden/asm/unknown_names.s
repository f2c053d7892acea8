.input %input f32[4]
.tensor %hidden f32[4]
.output result f32[4]
    ALLOC %hiden
    RELU %hidden, %inptu
    STORE reslt, %hidden
    KERNEL nothing
    JMP lop
loop:
    JNZ r1, loop
