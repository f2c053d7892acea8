; issue 34.3: 3000 temporaries allocated in a row, kept across 30000 NOPs, then freed.
; Planning this took O(L^3) time and O(N * L) memory; it must verify in well under a second.
.output y f32[1]
.rept i 3000
    ALLOC %t${i}: f32[1]
.endr
.rept j 30000
    NOP
.endr
.rept i 3000
    FREE %t${i}
.endr
    ALLOC %y: f32[1]
    FILL %y, 1.0
    STORE y, %y
    FREE %y
    HALT
