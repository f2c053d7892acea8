; a quantized embedding and projection (q8_0, q4_1 constants)
.const %emb q8_0[4, 32] = blocks("b5a642bdf22106f0847762f0f3cb4d764dc7072051159a0f89f2c6dacae344bb3112a9a86f84df9ad7c5b3d076ac0e8f53a7356c88913f20f6f72db022d24d0a96dad43cd6a917c1a98e78129e0327371065d095864f15ada0b846c1c0ebc5348adc799adf845418ad05d4a10ac0441eaaeeb4b48efa0b1f0abd80e998a35aba5ea0bd8799c1350d")
.const %w q4_1[3, 32] = blocks("372a0fb1439e71897aa75fde3134a4aa72e056284f2499b1e68a733d1161a15d8eae2bb042d7958af325dab194d6d112d34f6602f4de7110e993ae74")
.input %ids i32[2]
.output y f32[2, 3]
ALLOC %x: f32[2, 32]
GATHER %x, %emb, %ids
ALLOC %t: f32[2, 3]
MATMUL %t, %x, %w, tb, act=relu
STORE y, %t
FREE %t
FREE %x
