// elementwise.glsl -- op codes shared by the elementwise strict-tier kernels.
// The codes are the declaration order of exec::cpu::reference::{Unary, Binary}; the Rust side
// (src/exec/vulkan/kernels.rs) maps the enums to these numbers.
#ifndef ADEADVM_ELEMENTWISE_GLSL
#define ADEADVM_ELEMENTWISE_GLSL
#include "strict.glsl"

float ew_unary(uint op, float x) {
    switch (op) {
    case 0u: return strict_i_neg(x);
    case 1u: return strict_i_abs(x);
    case 2u: return strict_sqrt(x);
    case 3u: return strict_rsqrt(x);
    case 4u: return strict_exp(x);
    case 5u: return strict_log(x);
    case 6u: return strict_max(x, 0.0); // relu: max(x, 0) with NaN propagated
    case 7u: return strict_sigmoid(x);
    case 8u: return strict_tanh(x);
    case 9u: return strict_gelu(x);
    case 10u: return strict_silu(x);
    case 11u: return strict_erf(x);
    }
    return strict_i_nan();
}

float ew_binary(uint op, float a, float b) {
    switch (op) {
    case 0u: return strict_add(a, b);
    case 1u: return strict_sub(a, b);
    case 2u: return strict_mul(a, b);
    case 3u: return strict_div(a, b);
    case 4u: return strict_max(a, b);
    case 5u: return strict_min(a, b);
    }
    return strict_i_nan();
}

#endif // ADEADVM_ELEMENTWISE_GLSL
