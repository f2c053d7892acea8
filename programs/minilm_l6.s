; minilm_l6.s — sentence-transformers' all-MiniLM-L6-v2: sentence embeddings from token ids.
;
; The BERT encoder (6 layers, hidden 384, 12 heads of 32, feed-forward 1536, exact erf GELU,
; layernorm eps 1e-12, absolute position embeddings, token type 0), then mean pooling over the
; attention mask and L2 normalisation, as the published model's modules.json chains them
; (Transformer -> Pooling(mean) -> Normalize).
;
; Inputs:    input_ids       i32[B, T]   token ids from the model's tokenizer.json ([CLS] ... [SEP],
;                                        padded with 0 on the right)
;            attention_mask  i32[B, T]   1 for real tokens, 0 for padding
; Output:    embedding       f32[B, 384] unit-length sentence embeddings
; B and T are symbolic; T may be at most 512 (the position table's length: a longer input is a
; clean run-time error at the SLICE of the position table).
;
; Weights come from the model's model.safetensors (tensor names as in that file, no `bert.`
; prefix):
;     adeadvm asm programs/minilm_l6.s -D WEIGHTS=/abs/path/model.safetensors -o minilm.bib
; (scripts/fetch-minilm.sh downloads it and prints its folder; a relative WEIGHTS path is taken
; relative to this file's folder, like every path in a .s file.)
;
; What it computes, as Hugging Face's BertModel does (Linear weights are stored [out, in], so
; every projection is MATMUL ... tb):
;   x  = LN(word[ids] + type[0] + pos[0..T])
;   per layer l (0..5):
;     q, k, v = x @ Wq^T + bq, ...            split into 12 heads of 32: [B, 12, T, 32]
;     p = softmax(q @ k^T / sqrt(32) + mask)  mask[b, 0, 0, t] = (1 - attention_mask[b, t]) * f32 min
;     a = LN(merge(p @ v) @ Wo^T + bo + x)
;     x = LN(gelu(a @ Wi^T + bi) @ Wout^T + bout + a)
;   e = sum_t(x[b, t] * m[b, t]) / max(sum_t m[b, t], 1e-9)          (mean pooling)
;   embedding = e / max(|e|_2, 1e-12)                                  (F.normalize)
; The additive mask is HF's: (1 - mask) * torch.finfo(float32).min, written here as
; (mask - 1) * f32 max, which has the same bits. Masked keys get weight exactly 0 after the
; softmax, as in the published model.
;
; Unrolled with .rept rather than a loop over the layers. A loop would select each layer's
; weights with `LOAD %w, %w0, index=rN, count=6`, and LOAD copies the constant: 16 tensors,
; 1.78 M floats (7.1 MB) copied per layer per run, about 20% extra at B=1, T=128. Unrolled,
; every MATMUL reads its weights straight from the memory-mapped constants. The .rept body is
; the one copy of the layer's code either way; the price is 6x the instructions (~250 in all,
; 4 KB of code).
;
; The sizes are defines (-D overrides them): a mean-pooled BERT encoder with these tensor names
; and another depth or width assembles from this file, e.g. all-MiniLM-L12-v2 with -D L=12 (not
; tested here); give SCALE = 1/sqrt(HD) with another head size. tests/disasm_roundtrip.rs
; assembles a tiny one (D=8, two layers) from synthetic weights.

.tier strict
.define D 384
.define H 12
.define HD 32
.define FF 1536
.define L 6
.define EPS 1e-12
.define VOCAB 30522
.define MAXPOS 512
.define SCALE 0.17677669529663687               ; 1/sqrt(HD)
.dim B, T
.input %input_ids i32[B, T]
.input %attention_mask i32[B, T]
.output embedding f32[B, D]

; embeddings
.const %word f32[VOCAB, D] = safetensors("${WEIGHTS}", "embeddings.word_embeddings.weight")
.const %pos f32[MAXPOS, D] = safetensors("${WEIGHTS}", "embeddings.position_embeddings.weight")
.const %type f32[2, D] = safetensors("${WEIGHTS}", "embeddings.token_type_embeddings.weight")
.const %emb_ln_g f32[D] = safetensors("${WEIGHTS}", "embeddings.LayerNorm.weight")
.const %emb_ln_b f32[D] = safetensors("${WEIGHTS}", "embeddings.LayerNorm.bias")

; encoder layers: %NAME${l} is encoder.layer.${l}.…
.rept l ${L}
.const %q_w${l} f32[D, D] = safetensors("${WEIGHTS}", "encoder.layer.${l}.attention.self.query.weight")
.const %q_b${l} f32[D] = safetensors("${WEIGHTS}", "encoder.layer.${l}.attention.self.query.bias")
.const %k_w${l} f32[D, D] = safetensors("${WEIGHTS}", "encoder.layer.${l}.attention.self.key.weight")
.const %k_b${l} f32[D] = safetensors("${WEIGHTS}", "encoder.layer.${l}.attention.self.key.bias")
.const %v_w${l} f32[D, D] = safetensors("${WEIGHTS}", "encoder.layer.${l}.attention.self.value.weight")
.const %v_b${l} f32[D] = safetensors("${WEIGHTS}", "encoder.layer.${l}.attention.self.value.bias")
.const %ao_w${l} f32[D, D] = safetensors("${WEIGHTS}", "encoder.layer.${l}.attention.output.dense.weight")
.const %ao_b${l} f32[D] = safetensors("${WEIGHTS}", "encoder.layer.${l}.attention.output.dense.bias")
.const %ln1_g${l} f32[D] = safetensors("${WEIGHTS}", "encoder.layer.${l}.attention.output.LayerNorm.weight")
.const %ln1_b${l} f32[D] = safetensors("${WEIGHTS}", "encoder.layer.${l}.attention.output.LayerNorm.bias")
.const %i_w${l} f32[FF, D] = safetensors("${WEIGHTS}", "encoder.layer.${l}.intermediate.dense.weight")
.const %i_b${l} f32[FF] = safetensors("${WEIGHTS}", "encoder.layer.${l}.intermediate.dense.bias")
.const %o_w${l} f32[D, FF] = safetensors("${WEIGHTS}", "encoder.layer.${l}.output.dense.weight")
.const %o_b${l} f32[D] = safetensors("${WEIGHTS}", "encoder.layer.${l}.output.dense.bias")
.const %ln2_g${l} f32[D] = safetensors("${WEIGHTS}", "encoder.layer.${l}.output.LayerNorm.weight")
.const %ln2_b${l} f32[D] = safetensors("${WEIGHTS}", "encoder.layer.${l}.output.LayerNorm.bias")
.endr

    ; ---- the additive attention mask, [B, 1, 1, T]: broadcasts over heads and queries
    ALLOC %maskf: f32[B, T]
    CAST %maskf, %attention_mask
    ALLOC %maskm1: f32[B, T]
    SUB %maskm1, %maskf, 1.0                    ; mask - 1: 0 for tokens, -1 for padding
    ALLOC %maskadd: f32[B, T]
    MUL %maskadd, %maskm1, 3.4028234663852886e38 ; (1 - mask) * f32 min
    FREE %maskm1
    ALLOC %mask4: f32[B, 1, 1, T]
    RESHAPE %mask4, %maskadd
    FREE %maskadd

    ; ---- embeddings: (word + token type 0) + position, then layernorm
    ALLOC %we: f32[B, T, D]
    GATHER %we, %word, %input_ids
    ALLOC %te: f32[1, D]
    SLICE %te, %type, 0, 0                      ; token type 0 for every token
    ALLOC %wt: f32[B, T, D]
    ADD %wt, %we, %te
    FREE %te
    FREE %we
    ALLOC %pe: f32[T, D]
    SLICE %pe, %pos, 0, 0                       ; positions 0 .. T-1 (T <= MAXPOS, checked at run time)
    ALLOC %e: f32[B, T, D]
    ADD %e, %wt, %pe
    FREE %pe
    FREE %wt
    ALLOC %x: f32[B, T, D]
    LAYERNORM %x, %e, gamma=%emb_ln_g, beta=%emb_ln_b, eps=${EPS}
    FREE %e

    ; ---- the encoder: %x in, %x out, per layer
.rept l ${L}
    ; self-attention: projections split into heads [B, T, D] -> [B, T, H, HD] -> [B, H, T, HD]
    ALLOC %q: f32[B, T, D]
    MATMUL %q, %x, %q_w${l}, bias=%q_b${l}, tb
    ALLOC %q4: f32[B, T, H, HD]
    RESHAPE %q4, %q
    FREE %q
    ALLOC %qh: f32[B, H, T, HD]
    TRANSPOSE %qh, %q4, [0, 2, 1, 3]
    FREE %q4
    ALLOC %k: f32[B, T, D]
    MATMUL %k, %x, %k_w${l}, bias=%k_b${l}, tb
    ALLOC %k4: f32[B, T, H, HD]
    RESHAPE %k4, %k
    FREE %k
    ALLOC %kh: f32[B, H, T, HD]
    TRANSPOSE %kh, %k4, [0, 2, 1, 3]
    FREE %k4
    ALLOC %v: f32[B, T, D]
    MATMUL %v, %x, %v_w${l}, bias=%v_b${l}, tb
    ALLOC %v4: f32[B, T, H, HD]
    RESHAPE %v4, %v
    FREE %v
    ALLOC %vh: f32[B, H, T, HD]
    TRANSPOSE %vh, %v4, [0, 2, 1, 3]
    FREE %v4

    ; scores, masked softmax over the keys, weighted values
    ALLOC %s: f32[B, H, T, T]
    MATMUL %s, %qh, %kh, tb
    FREE %kh
    FREE %qh
    ALLOC %p: f32[B, H, T, T]
    SOFTMAX %p, %s, mask=%mask4, scale=${SCALE}
    FREE %s
    ALLOC %ctx: f32[B, H, T, HD]
    MATMUL %ctx, %p, %vh
    FREE %p
    FREE %vh
    ALLOC %ctx4: f32[B, T, H, HD]
    TRANSPOSE %ctx4, %ctx, [0, 2, 1, 3]
    FREE %ctx
    ALLOC %ctxm: f32[B, T, D]
    RESHAPE %ctxm, %ctx4
    FREE %ctx4

    ; output projection, residual, layernorm
    ALLOC %ao: f32[B, T, D]
    MATMUL %ao, %ctxm, %ao_w${l}, bias=%ao_b${l}, tb
    FREE %ctxm
    ALLOC %r1: f32[B, T, D]
    ADD %r1, %ao, %x
    FREE %ao
    ALLOC %a: f32[B, T, D]
    LAYERNORM %a, %r1, gamma=%ln1_g${l}, beta=%ln1_b${l}, eps=${EPS}
    FREE %r1

    ; feed-forward (GELU fused into the first MATMUL), residual, layernorm
    ALLOC %ff: f32[B, T, FF]
    MATMUL %ff, %a, %i_w${l}, bias=%i_b${l}, tb, act=gelu
    ALLOC %fo: f32[B, T, D]
    MATMUL %fo, %ff, %o_w${l}, bias=%o_b${l}, tb
    FREE %ff
    ALLOC %r2: f32[B, T, D]
    ADD %r2, %fo, %a
    FREE %fo
    FREE %a
    LAYERNORM %x, %r2, gamma=%ln2_g${l}, beta=%ln2_b${l}, eps=${EPS}
    FREE %r2
.endr
    FREE %mask4

    ; ---- mean pooling over the real tokens
    ALLOC %m3: f32[B, T, 1]
    RESHAPE %m3, %maskf
    ALLOC %xm: f32[B, T, D]
    MUL %xm, %x, %m3
    FREE %m3
    FREE %x
    ALLOC %sum: f32[B, D]
    REDUCE_SUM %sum, %xm, 1
    FREE %xm
    ALLOC %cnt: f32[B, 1]
    REDUCE_SUM %cnt, %maskf, 1
    FREE %maskf
    ALLOC %cntc: f32[B, 1]
    MAX %cntc, %cnt, 1e-9                       ; clamp(min=1e-9), as sentence-transformers does
    FREE %cnt
    ALLOC %mean: f32[B, D]
    DIV %mean, %sum, %cntc
    FREE %cntc
    FREE %sum

    ; ---- L2 normalisation: e / max(|e|, 1e-12)
    ALLOC %sq: f32[B, D]
    MUL %sq, %mean, %mean
    ALLOC %ss: f32[B, 1]
    REDUCE_SUM %ss, %sq, 1
    FREE %sq
    ALLOC %nrm: f32[B, 1]
    SQRT %nrm, %ss
    FREE %ss
    ALLOC %nrmc: f32[B, 1]
    MAX %nrmc, %nrm, 1e-12
    FREE %nrm
    ALLOC %emb: f32[B, D]
    DIV %emb, %mean, %nrmc
    FREE %nrmc
    FREE %mean
    STORE embedding, %emb
    FREE %emb
    HALT
