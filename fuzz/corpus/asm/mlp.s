; mlp.s — a two-layer perceptron on MNIST-sized inputs.
;
; Computes   h = relu((x / 28) @ w1 + b1)
;            y = (h / sqrt(128)) @ w2 + b2
; Input:     x  f32[B, 784]   a batch of flattened 28x28 images; B is symbolic (any batch size)
; Output:    y  f32[B, 10]    one logit per class
; Weights are standard-normal random constants made at assembly time (rand(seed, normal));
; the scalings by 1/sqrt(fan_in) keep the activations of order 1.

.tier strict
.dim B
.input %x f32[B, 784]
.const %w1 f32[784, 128] = rand(1, normal)
.const %b1 f32[128] = zeros
.const %w2 f32[128, 10] = rand(2, normal)
.const %b2 f32[10] = fill(0.01)
.output y f32[B, 10]

    ALLOC %xs: f32[B, 784]
    MUL %xs, %x, 0.035714287            ; 1/sqrt(784)
    ALLOC %h: f32[B, 128]
    MATMUL %h, %xs, %w1, bias=%b1, act=relu
    FREE %xs
    ALLOC %hs: f32[B, 128]
    MUL %hs, %h, 0.088388346            ; 1/sqrt(128)
    FREE %h
    ALLOC %logits: f32[B, 10]
    MATMUL %logits, %hs, %w2, bias=%b2
    FREE %hs
    STORE y, %logits
    FREE %logits
    HALT
