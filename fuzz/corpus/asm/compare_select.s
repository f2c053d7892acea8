; comparisons (EQ, LT, LE: i32 results, broadcasting), SELECT (an i32 cond; an expand of a
; row), ERF, in three dtypes and both placements
.input %x f32[3, 4]
.input %row f32[4]
.input %h f16[1, 4]
.input %i i32[3, 1]
.output s f32[3, 4]
.output e bf16[3, 4]
.output k i32[3, 4]
ALLOC %c: i32[3, 4]
LT %c, %x, %row
ALLOC %s: f32[3, 4]
SELECT %s, %c, %x, %row
ERF@gpu %s, %s
STORE s, %s
FREE %s
ALLOC %hx: f16[3, 4]
FILL %c, 1
SELECT@cpu %hx, %c, %h, %h
ALLOC %k: i32[3, 4]
EQ %k, %hx, %h
LE %c, %i, %k
SELECT %k, %c, %k, %i
STORE k, %k
ALLOC %e: bf16[3, 4]
CAST %e, %hx
STORE e, %e
FREE %e
FREE %k
FREE %hx
FREE %c
