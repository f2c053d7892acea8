.define A xxxxxxxxxxxxxxxx
.define B ${A}${A}${A}${A}${A}${A}${A}${A}${A}${A}${A}${A}${A}${A}${A}${A}
.define C ${B}${B}${B}${B}${B}${B}${B}${B}${B}${B}${B}${B}${B}${B}${B}${B}
.define D ${C}${C}${C}${C}${C}${C}${C}${C}${C}${C}${C}${C}${C}${C}${C}${C}
.define E ${D}${D}${D}${D}${D}${D}${D}${D}${D}${D}${D}${D}${D}${D}${D}${D}
.define F ${E}${E}${E}${E}${E}${E}${E}${E}${E}${E}${E}${E}${E}${E}${E}${E}
.define G ${F}${F}${F}${F}${F}${F}${F}${F}${F}${F}${F}${F}${F}${F}${F}${F}
.define H ${G}${G}${G}${G}${G}${G}${G}${G}${G}${G}${G}${G}${G}${G}${G}${G}
.define I ${H}${H}${H}${H}${H}${H}${H}${H}${H}${H}${H}${H}${H}${H}${H}${H}
.define J ${I}${I}${I}${I}${I}${I}${I}${I}${I}${I}${I}${I}${I}${I}${I}${I}
.define K ${J}${J}${J}${J}${J}${J}${J}${J}${J}${J}${J}${J}${J}${J}${J}${J}
.input %x f32[4]
.output y f32[4]
    STORE y, %x
    HALT
