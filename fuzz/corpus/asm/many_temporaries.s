; issue 34.3: temporaries allocated in a row, kept across many NOPs, then freed. Planning this
; took O(L^3) time and O(N * L) memory. The full-size case (3000 across 300,000) is in
; tests/verify.rs; this seed is a tenth of that, so that the fuzzer's mutations of it (most of
; what it ran: 10 inputs a second at 3000 x 30000 under ASan) stay quick.
.output y f32[1]
.rept i 300
    ALLOC %t${i}: f32[1]
.endr
.rept j 3000
    NOP
.endr
.rept i 300
    FREE %t${i}
.endr
    ALLOC %y: f32[1]
    FILL %y, 1.0
    STORE y, %y
    FREE %y
    HALT
