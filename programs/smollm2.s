; smollm2.s — greedy text generation with a Llama-architecture language model from its GGUF file,
; by default HuggingFaceTB/SmolLM2-135M-Instruct (30 blocks, d_model 576, 9 query heads and 3
; key/value heads of 64, SwiGLU FFN 1536, RMSNorm eps 1e-5, RoPE theta 100000, vocab 49152, the
; output layer tied to the token embedding).
;
;     scripts/fetch-smollm2.sh                       # prints the folder holding the .gguf
;     adeadvm asm programs/smollm2.s -D WEIGHTS=/path/to/SmolLM2-135M-Instruct.Q4_1.gguf -o smollm2.bib
;     adeadvm generate smollm2.bib --prompt "What is the capital of France?" --max-tokens 32
;
; The whole generation is one run: a loop of decode steps, each consuming one token per sequence.
; Step j works at position j for every sequence: while j is inside a sequence's prompt it consumes
; the prompt's token j (the prompt is processed token by token), afterwards its own last generated
; token. So a sequence's positions, its key/value cache and its attention mask are the same alone
; or in a batch, whatever the other prompts' lengths (no padding is ever processed), and every
; instruction computes each sequence's rows from that sequence's rows only: in the strict tier a
; prompt's tokens and logits are the same bits alone and in any batch (tests/smollm2.rs).
;
; Inputs (`adeadvm generate` builds them from token ids):
;   feed     i32[N, B]  feed[j, b] = token j of prompt b while j < its length, else -1. N is the
;                       number of steps to run at most: the longest prompt - 1 + max_new (<= CTX).
;   lens     i32[B]     prompt lengths (at least 1)
;   max_new  i32[1]     tokens to generate per sequence (1 .. MAXNEW)
;   stop     i32[1]     the end-of-text token: a sequence is done once it produced it; the run ends
;                       when every sequence is done. -1: never (exactly max_new tokens each).
; Outputs:
;   tokens   i32[B, MAXNEW]      the generated ids in order; -1 where none was generated
;   logits   f32[B, KEEP, VOCAB] the logits that chose each sequence's first KEEP tokens
;
; Weights keep the GGUF's blocks by default: the projections are q4_1 and the token embedding
; (also the tied output layer) q8_0, the file's bytes as they are, so the .bib is about the
; GGUF's size, and MATMUL and GATHER read the blocks as the f32 values ggml's dequantization
; defines. `-D PROJ=f32 -D EMBED=f32` dequantizes them into f32 constants at assembly time
; instead (about 4 bytes a parameter): the same values, so the same tokens and the same bits of
; every logit (tests/smollm2.rs). A GGUF whose tensors have other types needs those defines (or
; ones naming its types): the assembler refuses a block type that is not the file's.
;
; The GGUF stores the q and k
; projections' rows permuted for rotary embedding on adjacent pairs (llama.cpp's convention), so
; RoPE here rotates adjacent pairs (x[2i], x[2i+1]) by the angle p * theta^(-2i/64), with the
; tables from `rope_cos`/`rope_sin`; the attention scores equal Hugging Face's rotate-half form on
; the unpermuted weights (tests/smollm2.rs compares against a float64 reference written that way).
;
; The key/value caches are [B, KVH, CTX, HD] temporaries written at position j by PUT, and every
; step attends over all CTX positions with an additive mask that is -0 at positions <= j and -inf
; after (softmax gives those exactly 0, and the cache there is never read into the result).

.tier strict
.define L 30
.define D 576
.define H 9
.define KVH 3
.define GROUP 3                 ; H / KVH query heads share a key/value head
.define HD 64
.define HALF 32                 ; HD / 2 rotation pairs
.define KVD 192                 ; KVH * HD
.define FF 1536
.define VOCAB 49152
.define EPS 1e-5
.define THETA 100000
.define SCALE 0.125             ; 1 / sqrt(HD)
.define CTX 512                 ; positions the cache holds: the longest prompt + max_new - 1 at most
.define MAXNEW 256              ; most tokens generated per sequence
.define KEEP 4                  ; logits kept per sequence (of its first tokens)
.define MAXB 64                 ; most sequences in a batch
.define PROJ q4_1               ; the projections' type: the GGUF's blocks (f32: dequantized)
.define EMBED q8_0              ; the token embedding's (and output layer's) type, likewise
.dim N, B, P0
.define P1 1                    ; the rows of a decode step (P0, the prefill block's, is symbolic)
.input %feed i32[N, B]
.input %prefix i32[B, P0]
.input %lens i32[B]
.input %max_new i32[1]
.input %stop i32[1]
.output tokens i32[B, MAXNEW]
.output logits f32[B, KEEP, VOCAB]

.vocab gguf("${WEIGHTS}")                       ; the tokenizer, for `adeadvm generate --prompt`
.const %embed ${EMBED}[VOCAB, D] = gguf("${WEIGHTS}", "token_embd.weight")
.const %out_norm f32[D] = gguf("${WEIGHTS}", "output_norm.weight")
.rept l ${L}
.const %attn_norm${l} f32[D] = gguf("${WEIGHTS}", "blk.${l}.attn_norm.weight")
.const %wq${l} ${PROJ}[D, D] = gguf("${WEIGHTS}", "blk.${l}.attn_q.weight")
.const %wk${l} ${PROJ}[KVD, D] = gguf("${WEIGHTS}", "blk.${l}.attn_k.weight")
.const %wv${l} ${PROJ}[KVD, D] = gguf("${WEIGHTS}", "blk.${l}.attn_v.weight")
.const %wo${l} ${PROJ}[D, D] = gguf("${WEIGHTS}", "blk.${l}.attn_output.weight")
.const %ffn_norm${l} f32[D] = gguf("${WEIGHTS}", "blk.${l}.ffn_norm.weight")
.const %wgate${l} ${PROJ}[FF, D] = gguf("${WEIGHTS}", "blk.${l}.ffn_gate.weight")
.const %wup${l} ${PROJ}[FF, D] = gguf("${WEIGHTS}", "blk.${l}.ffn_up.weight")
.const %wdown${l} ${PROJ}[D, FF] = gguf("${WEIGHTS}", "blk.${l}.ffn_down.weight")
.endr
.const %rope_cos f32[CTX, HD] = rope_cos(${THETA})
.const %rope_sin f32[CTX, HD] = rope_sin(${THETA})
.const %positions f32[CTX] = arange
.const %rows i32[MAXB] = arange
.const %one i32[1] = fill(1)
.const %zero i32[1] = fill(0)
.const %maxnew_c i32[1] = fill(${MAXNEW})
.const %keep_c i32[1] = fill(${KEEP})
.const %ctx_len i32[1] = fill(${CTX})          ; read by `adeadvm generate` to check a request fits

    ; ---- per-run state
    ; the key/value caches, one pair a layer: [B, KVH, CTX, HD], position j written at step j
.rept l ${L}
    ALLOC %kc${l}: f32[B, KVH, 1, CTX, HD]
    FILL %kc${l}, 0
    ALLOC %vc${l}: f32[B, KVH, 1, CTX, HD]
    FILL %vc${l}, 0
.endr
    ; what the run keeps: [B, 2, n, ...] where half 0 holds token g (or its logits) at slot g and
    ; half 1 takes the writes of sequences that made no token to keep at this step
    ALLOC %toks: i32[B, 2, MAXNEW, 1]
    FILL %toks, -1
    ALLOC %keep: f32[B, 2, KEEP, VOCAB]
    FILL %keep, 0
    ; row b's first row in each, b * 2 * MAXNEW and b * 2 * KEEP
    ALLOC %b_ix: i32[B]
    SLICE %b_ix, %rows, 0, 0
    ADD %b_ix, %b_ix, %b_ix
    ALLOC %tok_base: i32[B]
    MUL %tok_base, %b_ix, %maxnew_c
    ALLOC %keep_base: i32[B]
    MUL %keep_base, %b_ix, %keep_c
    FREE %b_ix
    ; the step at which each sequence makes its first token: its prompt's last position
    ALLOC %first: i32[B]
    SUB %first, %lens, %one
    ALLOC %gen: i32[B]                          ; each sequence's last generated token
    FILL %gen, 0
    ALLOC %done: i32[B]                         ; 1 once a sequence produced `stop`
    FILL %done, 0
    ALLOC %jt: i32[1]                           ; the step, as a tensor
    FILL %jt, 0
    ISET r0, 0

    ; ---- the prefill block: the first P0 positions of every sequence at once (P0 = the shortest
    ; prompt's length - 1, so that no sequence ends its prompt inside it). Each row's result
    ; is the one the decode steps would give it: every kernel computes a row from that row only.
    ALLOC %ones: f32[P0]                        ; r1 = P0 (a sum of ones, exact)
    FILL %ones, 1
    ALLOC %block_f: f32[1]
    REDUCE_SUM %block_f, %ones, 0
    FREE %ones
    ALLOC %block_n: i32[1]
    CAST %block_n, %block_f
    FREE %block_f
    TGET r1, %block_n, r0
    FREE %block_n
    ISET r10, 0                                 ; the block's first position
    JZ r1, decode
    ALLOC %x0: f32[B, P0, D]
    GATHER %x0, %embed, %prefix
    ALLOC %cos_rows: f32[P0, HD]
    SLICE %cos_rows, %rope_cos, 0, 0
    ALLOC %cos0: f32[P0, 1, HD]
    RESHAPE %cos0, %cos_rows
    FREE %cos_rows
    ALLOC %sin_rows: f32[P0, HD]
    SLICE %sin_rows, %rope_sin, 0, 0
    ALLOC %sin0: f32[P0, 1, HD]
    RESHAPE %sin0, %sin_rows
    FREE %sin_rows
    ALLOC %pos_rows: f32[P0]
    SLICE %pos_rows, %positions, 0, 0
    ALLOC %pos0: f32[P0, 1]
    RESHAPE %pos0, %pos_rows
    FREE %pos_rows
    ALLOC %mask0: f32[P0, CTX]                  ; -0 at positions <= the row's, -inf after
    SUB %mask0, %positions, %pos0
    FREE %pos0
    RELU %mask0, %mask0
    MIN %mask0, %mask0, 1.0
    MUL %mask0, %mask0, -3.4028234663852886e38
    MUL %mask0, %mask0, 2.0
    JMP layers0

    ; ---- the decode steps: step j consumes, for every sequence, position j
decode:
    ALLOC %feed_row: i32[1, B]
step:
    TSET %jt, r0, r1
    IADDI r11, r1, 0                            ; the step's position, for the layers
    ; this step's token per sequence: the prompt's while it lasts, else the last generated
    SLICE %feed_row, %feed, 0, r1
    ALLOC %fed: i32[B]
    RESHAPE %fed, %feed_row
    ALLOC %is_prompt: i32[B]                    ; 1 where fed >= 0: min(max(fed + 1, 0), 1)
    ADD %is_prompt, %fed, %one
    MAX %is_prompt, %is_prompt, %zero
    MIN %is_prompt, %is_prompt, %one
    ALLOC %tok: i32[B, 1]
    ALLOC %tok_b: i32[B]
    MUL %tok_b, %fed, %is_prompt                ; fed where it is a prompt token
    ALLOC %other: i32[B]
    SUB %other, %one, %is_prompt
    MUL %other, %other, %gen                    ; gen where it is not
    ADD %tok_b, %tok_b, %other
    RESHAPE %tok, %tok_b
    FREE %tok_b
    FREE %other
    FREE %is_prompt
    FREE %fed
    ALLOC %x1: f32[B, P1, D]
    GATHER %x1, %embed, %tok
    FREE %tok
    ALLOC %cos_row: f32[1, HD]
    SLICE %cos_row, %rope_cos, 0, r1
    ALLOC %cos1: f32[1, 1, HD]
    RESHAPE %cos1, %cos_row
    FREE %cos_row
    ALLOC %sin_row: f32[1, HD]
    SLICE %sin_row, %rope_sin, 0, r1
    ALLOC %sin1: f32[1, 1, HD]
    RESHAPE %sin1, %sin_row
    FREE %sin_row
    ALLOC %jf: f32[1]
    CAST %jf, %jt
    ALLOC %pos1: f32[1, 1]
    RESHAPE %pos1, %jf
    FREE %jf
    ALLOC %mask1: f32[1, CTX]                   ; -0 at positions <= j, -inf after
    SUB %mask1, %positions, %pos1
    FREE %pos1
    RELU %mask1, %mask1
    MIN %mask1, %mask1, 1.0
    MUL %mask1, %mask1, -3.4028234663852886e38  ; -0 or -f32 max,
    MUL %mask1, %mask1, 2.0                     ; then -inf (the product overflows)
    JMP layers1

    ; ---- the decoder's layers, once for the prefill block (ph 0: P0 rows a sequence, from
    ; position r10) and once for a decode step (ph 1: one row, position r11)
.rept ph 2
layers${ph}:
.rept l ${L}
    ; attention: q [B, P, H, HD], k and v [B, P, KVH, HD], rotary on adjacent pairs
    ALLOC %h${ph}: f32[B, P${ph}, D]
    RMSNORM %h${ph}, %x${ph}, gamma=%attn_norm${l}, eps=${EPS}
    ALLOC %q${ph}: f32[B, P${ph}, D]
    MATMUL %q${ph}, %h${ph}, %wq${l}, tb
    ALLOC %k${ph}: f32[B, P${ph}, KVD]
    MATMUL %k${ph}, %h${ph}, %wk${l}, tb
    ALLOC %v${ph}: f32[B, P${ph}, KVD]
    MATMUL %v${ph}, %h${ph}, %wv${l}, tb
    FREE %h${ph}
    ALLOC %qp${ph}: f32[B, P${ph}, H, HALF, 2]
    RESHAPE %qp${ph}, %q${ph}
    FREE %q${ph}
    ALLOC %q_even${ph}: f32[B, P${ph}, H, HALF, 1]
    SLICE %q_even${ph}, %qp${ph}, 4, 0
    ALLOC %q_odd${ph}: f32[B, P${ph}, H, HALF, 1]
    SLICE %q_odd${ph}, %qp${ph}, 4, 1
    NEG %q_odd${ph}, %q_odd${ph}
    ALLOC %q_rot${ph}: f32[B, P${ph}, H, HALF, 2]   ; (-x[2i+1], x[2i]) in each pair
    CONCAT %q_rot${ph}, %q_odd${ph}, %q_even${ph}, 4
    FREE %q_odd${ph}
    FREE %q_even${ph}
    ALLOC %q4${ph}: f32[B, P${ph}, H, HD]
    RESHAPE %q4${ph}, %qp${ph}
    FREE %qp${ph}
    ALLOC %qr4${ph}: f32[B, P${ph}, H, HD]
    RESHAPE %qr4${ph}, %q_rot${ph}
    FREE %q_rot${ph}
    MUL %q4${ph}, %q4${ph}, %cos${ph}
    MUL %qr4${ph}, %qr4${ph}, %sin${ph}
    ADD %q4${ph}, %q4${ph}, %qr4${ph}
    FREE %qr4${ph}
    ALLOC %qt${ph}: f32[B, H, P${ph}, HD]
    TRANSPOSE %qt${ph}, %q4${ph}, [0, 2, 1, 3]
    FREE %q4${ph}
    ALLOC %qg${ph}: f32[B, KVH, GROUP, P${ph}, HD]   ; query heads 3g .. 3g + 2 use key/value head g
    RESHAPE %qg${ph}, %qt${ph}
    FREE %qt${ph}

    ALLOC %kp${ph}: f32[B, P${ph}, KVH, HALF, 2]
    RESHAPE %kp${ph}, %k${ph}
    FREE %k${ph}
    ALLOC %k_even${ph}: f32[B, P${ph}, KVH, HALF, 1]
    SLICE %k_even${ph}, %kp${ph}, 4, 0
    ALLOC %k_odd${ph}: f32[B, P${ph}, KVH, HALF, 1]
    SLICE %k_odd${ph}, %kp${ph}, 4, 1
    NEG %k_odd${ph}, %k_odd${ph}
    ALLOC %k_rot${ph}: f32[B, P${ph}, KVH, HALF, 2]
    CONCAT %k_rot${ph}, %k_odd${ph}, %k_even${ph}, 4
    FREE %k_odd${ph}
    FREE %k_even${ph}
    ALLOC %k4${ph}: f32[B, P${ph}, KVH, HD]
    RESHAPE %k4${ph}, %kp${ph}
    FREE %kp${ph}
    ALLOC %kr4${ph}: f32[B, P${ph}, KVH, HD]
    RESHAPE %kr4${ph}, %k_rot${ph}
    FREE %k_rot${ph}
    MUL %k4${ph}, %k4${ph}, %cos${ph}
    MUL %kr4${ph}, %kr4${ph}, %sin${ph}
    ADD %k4${ph}, %k4${ph}, %kr4${ph}
    FREE %kr4${ph}
    ; this layer's caches hold these positions from now on
    ALLOC %kt${ph}: f32[B, KVH, P${ph}, HD]
    TRANSPOSE %kt${ph}, %k4${ph}, [0, 2, 1, 3]
    FREE %k4${ph}
    ALLOC %k5${ph}: f32[B, KVH, 1, P${ph}, HD]
    RESHAPE %k5${ph}, %kt${ph}
    FREE %kt${ph}
    PUT %kc${l}, %k5${ph}, 3, r1${ph}
    FREE %k5${ph}
    ALLOC %v4${ph}: f32[B, P${ph}, KVH, HD]
    RESHAPE %v4${ph}, %v${ph}
    FREE %v${ph}
    ALLOC %vt${ph}: f32[B, KVH, P${ph}, HD]
    TRANSPOSE %vt${ph}, %v4${ph}, [0, 2, 1, 3]
    FREE %v4${ph}
    ALLOC %v5${ph}: f32[B, KVH, 1, P${ph}, HD]
    RESHAPE %v5${ph}, %vt${ph}
    FREE %vt${ph}
    PUT %vc${l}, %v5${ph}, 3, r1${ph}
    FREE %v5${ph}

    ALLOC %s${ph}: f32[B, KVH, GROUP, P${ph}, CTX]
    MATMUL %s${ph}, %qg${ph}, %kc${l}, tb
    FREE %qg${ph}
    ALLOC %p${ph}: f32[B, KVH, GROUP, P${ph}, CTX]
    SOFTMAX %p${ph}, %s${ph}, mask=%mask${ph}, scale=${SCALE}
    FREE %s${ph}
    ALLOC %ctx${ph}: f32[B, KVH, GROUP, P${ph}, HD]
    MATMUL %ctx${ph}, %p${ph}, %vc${l}
    FREE %p${ph}
    ALLOC %ctxh${ph}: f32[B, H, P${ph}, HD]
    RESHAPE %ctxh${ph}, %ctx${ph}
    FREE %ctx${ph}
    ALLOC %ctxt${ph}: f32[B, P${ph}, H, HD]
    TRANSPOSE %ctxt${ph}, %ctxh${ph}, [0, 2, 1, 3]
    FREE %ctxh${ph}
    ALLOC %ctxm${ph}: f32[B, P${ph}, D]
    RESHAPE %ctxm${ph}, %ctxt${ph}
    FREE %ctxt${ph}
    ALLOC %ao${ph}: f32[B, P${ph}, D]
    MATMUL %ao${ph}, %ctxm${ph}, %wo${l}, tb
    FREE %ctxm${ph}
    ADD %x${ph}, %x${ph}, %ao${ph}
    FREE %ao${ph}

    ; SwiGLU feed-forward: down(silu(gate(h)) * up(h))
    ALLOC %h2${ph}: f32[B, P${ph}, D]
    RMSNORM %h2${ph}, %x${ph}, gamma=%ffn_norm${l}, eps=${EPS}
    ALLOC %g${ph}: f32[B, P${ph}, FF]
    MATMUL %g${ph}, %h2${ph}, %wgate${l}, tb
    ALLOC %u${ph}: f32[B, P${ph}, FF]
    MATMUL %u${ph}, %h2${ph}, %wup${l}, tb
    FREE %h2${ph}
    SILU %g${ph}, %g${ph}
    MUL %g${ph}, %g${ph}, %u${ph}
    FREE %u${ph}
    ALLOC %dn${ph}: f32[B, P${ph}, D]
    MATMUL %dn${ph}, %g${ph}, %wdown${l}, tb
    FREE %g${ph}
    ADD %x${ph}, %x${ph}, %dn${ph}
    FREE %dn${ph}
.endr
    FREE %mask${ph}
    FREE %sin${ph}
    FREE %cos${ph}
    JMP after${ph}
.endr

after0:
    FREE %x0                                    ; the block's hidden states: only its caches are kept
    JMP decode

after1:
    ; ---- the next token: the output layer is the token embedding (tied), then ARGMAX
    ALLOC %xn3: f32[B, 1, D]
    RMSNORM %xn3, %x1, gamma=%out_norm, eps=${EPS}
    FREE %x1
    ALLOC %xn: f32[B, D]
    RESHAPE %xn, %xn3
    FREE %xn3
    ALLOC %lg: f32[B, VOCAB]
    MATMUL %lg, %xn, %embed, tb
    FREE %xn
    ARGMAX %gen, %lg

    ; ---- record: g = j - first is the index of the token just made, kept when 0 <= g < max_new
    ALLOC %g_ix: i32[B]
    SUB %g_ix, %jt, %first
    ALLOC %valid: i32[B]                        ; min(max(g + 1, 0), 1) * min(max(max_new - g, 0), 1)
    ADD %valid, %g_ix, %one
    MAX %valid, %valid, %zero
    MIN %valid, %valid, %one
    ALLOC %below: i32[B]
    SUB %below, %max_new, %g_ix
    MAX %below, %below, %zero
    MIN %below, %below, %one
    MUL %valid, %valid, %below
    FREE %below
    ; the row to write: half 0 at slot g where valid, else half 1 (slot g clamped to the
    ; tensor); row = base + (1 - valid) * n + clamp(g, 0, n - 1), n being MAXNEW or KEEP
    ALLOC %discard: i32[B]
    SUB %discard, %one, %valid
    ALLOC %slot: i32[B]
    ALLOC %top: i32[1]
    SUB %top, %maxnew_c, %one
    MAX %slot, %g_ix, %zero
    MIN %slot, %slot, %top
    ALLOC %row: i32[B]
    MUL %row, %discard, %maxnew_c
    ADD %row, %row, %slot
    ADD %row, %row, %tok_base
    ALLOC %gen1: i32[B, 1]
    RESHAPE %gen1, %gen
    SCATTER %toks, %gen1, %row
    FREE %gen1
    ; logits: kept while g < KEEP as well
    ALLOC %kept: i32[B]
    SUB %kept, %keep_c, %g_ix
    MAX %kept, %kept, %zero
    MIN %kept, %kept, %one
    MUL %kept, %kept, %valid
    SUB %discard, %one, %kept
    SUB %top, %keep_c, %one
    MAX %slot, %g_ix, %zero
    MIN %slot, %slot, %top
    MUL %row, %discard, %keep_c
    ADD %row, %row, %slot
    ADD %row, %row, %keep_base
    SCATTER %keep, %lg, %row
    FREE %kept
    FREE %row
    FREE %top
    FREE %slot
    FREE %discard
    FREE %lg

    ; ---- done: produced `stop` (when stop >= 0) or its last token (g >= max_new - 1)
    ALLOC %is_stop: i32[B]                      ; 1 - min(|gen - stop|, 1), only where valid
    SUB %is_stop, %gen, %stop
    ABS %is_stop, %is_stop
    MIN %is_stop, %is_stop, %one
    SUB %is_stop, %one, %is_stop
    MUL %is_stop, %is_stop, %valid             ; (stop = -1 matches no token)
    MAX %done, %done, %is_stop
    FREE %is_stop
    ALLOC %last: i32[B]                         ; g >= max_new - 1: min(max(g - max_new + 2, 0), 1)
    SUB %last, %g_ix, %max_new
    ADD %last, %last, %one
    ADD %last, %last, %one
    MAX %last, %last, %zero
    MIN %last, %last, %one
    MAX %last, %last, %done
    ; the run goes on while some sequence is not done: max over b of (1 - last)
    SUB %last, %one, %last
    ALLOC %left_f: f32[B]
    CAST %left_f, %last
    ALLOC %any_f: f32[1]
    REDUCE_MAX %any_f, %left_f, 0
    ALLOC %any: i32[1]
    CAST %any, %any_f
    TGET r7, %any, r0
    FREE %any
    FREE %any_f
    FREE %left_f
    FREE %last
    FREE %valid
    FREE %g_ix
    IADDI r1, r1, 1
    JZ r7, finish
    JMP step

finish:
    ALLOC %tok_out: i32[B, 1, MAXNEW, 1]
    SLICE %tok_out, %toks, 1, 0
    ALLOC %tok2: i32[B, MAXNEW]
    RESHAPE %tok2, %tok_out
    STORE tokens, %tok2
    FREE %tok2
    FREE %tok_out
    ALLOC %keep_out: f32[B, 1, KEEP, VOCAB]
    SLICE %keep_out, %keep, 1, 0
    ALLOC %keep3: f32[B, KEEP, VOCAB]
    RESHAPE %keep3, %keep_out
    STORE logits, %keep3
    FREE %keep3
    FREE %keep_out
    FREE %feed_row
    FREE %jt
    FREE %done
    FREE %gen
    FREE %first
    FREE %keep_base
    FREE %tok_base
    FREE %keep
    FREE %toks
.rept l ${L}
    FREE %vc${l}
    FREE %kc${l}
.endr
    HALT
