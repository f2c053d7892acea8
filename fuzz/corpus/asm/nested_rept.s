.rept i0 1
.rept i1 1
.rept i2 1
.rept i3 1
.rept i4 1
.rept i5 1
.rept i6 1
.rept i7 1
.rept i8 1
.rept i9 1
.rept i10 1
.rept i11 1
.rept i12 1
.rept i13 1
.rept i14 1
.rept i15 1
.rept i16 1
.rept i17 1
.rept i18 1
.rept i19 1
.rept i20 1
.rept i21 1
.rept i22 1
.rept i23 1
.rept i24 1
.rept i25 1
.rept i26 1
.rept i27 1
.rept i28 1
.rept i29 1
.rept i30 1
.rept i31 1
.rept i32 1
.rept i33 1
.rept i34 1
.rept i35 1
.rept i36 1
.rept i37 1
.rept i38 1
.rept i39 1
.rept i40 1
.rept i41 1
.rept i42 1
.rept i43 1
.rept i44 1
.rept i45 1
.rept i46 1
.rept i47 1
.rept i48 1
.rept i49 1
.rept i50 1
.rept i51 1
.rept i52 1
.rept i53 1
.rept i54 1
.rept i55 1
.rept i56 1
.rept i57 1
.rept i58 1
.rept i59 1
.rept i60 1
.rept i61 1
.rept i62 1
.rept i63 1
.rept i64 1
.rept i65 1
.rept i66 1
.rept i67 1
.rept i68 1
.rept i69 1
.rept i70 1
.rept i71 1
.rept i72 1
.rept i73 1
.rept i74 1
.rept i75 1
.rept i76 1
.rept i77 1
.rept i78 1
.rept i79 1
.rept i80 1
.rept i81 1
.rept i82 1
.rept i83 1
.rept i84 1
.rept i85 1
.rept i86 1
.rept i87 1
.rept i88 1
.rept i89 1
.rept i90 1
.rept i91 1
.rept i92 1
.rept i93 1
.rept i94 1
.rept i95 1
.rept i96 1
.rept i97 1
.rept i98 1
.rept i99 1
    NOP
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
.endr
    HALT
