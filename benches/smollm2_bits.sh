#!/usr/bin/env bash
# SmolLM2-135M shapes with random weights (benches/peer_smollm2.py SyntheticGGUF, written as an
# f32 GGUF): the strict tier's logits and tokens on --backend cpu and vulkan, alone and in a batch
# with a prompt of another length, compared bit for bit. For the GPU machine (see
# ../shared/gpu/README.md): run from the project root with $OUT set; results land in $OUT.
set -u
for f in .gl/*.deb; do dpkg -x $f / ; done; ldconfig
printf '{"file_format_version":"1.0.0","ICD":{"library_path":"libEGL_nvidia.so.0","api_version":"1.4.312"}}' > /tmp/egl_icd.json
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
B=target/release/adeadvm
$B info > $OUT/info.txt 2>&1 || { export VK_DRIVER_FILES=/tmp/egl_icd.json; $B info > $OUT/info.txt 2>&1; }
nvidia-smi --query-gpu=name,driver_version --format=csv > $OUT/gpu.txt
W=/tmp/syn.gguf
python3 -c "
import sys; sys.path.insert(0, 'benches'); sys.argv=['x']
import peer_smollm2 as p
p.SyntheticGGUF().write('$W')
" > $OUT/write.txt 2>&1
# The synthetic file's tensors are f32, so the program's weights are declared f32 to match.
$B asm programs/smollm2.s -D WEIGHTS=$W -D PROJ=f32 -D EMBED=f32 -o /tmp/syn.bib > $OUT/asm.txt 2>&1
P=$(python3 -c "import numpy as np; r=np.random.default_rng(0); print(','.join(map(str, r.integers(300, 49152, size=40).tolist())))")
Q=$(python3 -c "import numpy as np; r=np.random.default_rng(1); print(','.join(map(str, r.integers(300, 49152, size=17).tolist())))")
for be in cpu vulkan; do
  $B generate /tmp/syn.bib --prompt-ids $P --max-tokens 48 --ignore-eos --json --backend $be --logits-out $OUT/l1_$be.npy > $OUT/g1_$be.json 2>$OUT/g1_$be.err
  $B generate /tmp/syn.bib --prompt-ids $P --prompt-ids $Q --max-tokens 48 --ignore-eos --json --backend $be --logits-out $OUT/l2_$be.npy > $OUT/g2_$be.json 2>$OUT/g2_$be.err
done
$B generate /tmp/syn.bib --prompt-ids $P --max-tokens 48 --ignore-eos --json --backend vulkan --threads 3 --logits-out $OUT/l1_vulkan_t3.npy > $OUT/g1_vulkan_t3.json 2>&1
cmp $OUT/l1_cpu.npy $OUT/l1_vulkan.npy && echo "logits alone: cpu == vulkan" >> $OUT/bits.txt
cmp $OUT/l2_cpu.npy $OUT/l2_vulkan.npy && echo "logits batch: cpu == vulkan" >> $OUT/bits.txt
python3 -c "
import numpy as np, json
a=np.load('$OUT/l1_cpu.npy'); b=np.load('$OUT/l2_cpu.npy'); c=np.load('$OUT/l2_vulkan.npy')
print('alone vs batch row 0 (cpu):', a.tobytes()==b[0].tobytes(), ' (vulkan):', np.load('$OUT/l1_vulkan.npy').tobytes()==c[0].tobytes())
print('ids alone cpu/vulkan', json.load(open('$OUT/g1_cpu.json'))['ids'][:8], json.load(open('$OUT/g1_vulkan.json'))['ids'][:8])
" >> $OUT/bits.txt 2>&1
