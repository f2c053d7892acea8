.inptu %x f32[4]
.tier speedy
.dim B
.dim B
