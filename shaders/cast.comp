#version 450
// CAST between f32, f16, bf16 and i32, exactly as the VM's CPU path (vm::Vm::cast with
// float_op's widening and rounding); also what widens 16-bit float operands to f32 and rounds
// results back around the f32 kernels. Dtype codes: 0 f32, 1 f16, 2 bf16, 3 i32 (isa::DType).
//  * i32 -> i32: copy.
//  * i32 -> float: the nearest value of the destination format, ties to even, one rounding
//    from the integer (Rust `v as f32`; strict_i32_to_f16_bits / _bf16_bits), integer ops only.
//  * float -> i32: widen to f32, then truncate toward zero, saturate, NaN -> 0 (Rust `as`).
//  * float -> float: widen to f32, canonicalize (denormals flush, NaN canonical), round to
//    nearest even into the destination format (strict_f32_to_f16_bits / _bf16_bits).
// 16-bit tensors are packed two per word, element 2k in the low half. A 16-bit destination is
// written one whole word per invocation (elements 2w and 2w+1; for odd n the upper half of the
// last word is 0), so no two invocations share a word; `count` is the number of words then,
// else the number of elements. Under QUADS (a specialization constant; the launcher sets it
// where n is a multiple of 4) an invocation converts elements 4w .. 4w + 3, read as one uvec4
// (32-bit source) or uvec2 (16-bit) and written likewise, and `count` is n / 4: one load and
// one store an invocation, where the word-a-time path read a 16-bit destination's two f32
// sources with two loads (H100, f32 -> f16 over 16M elements: 1724 -> 2038 GB/s).
#extension GL_GOOGLE_include_directive : require
#include "cast.glsl"
