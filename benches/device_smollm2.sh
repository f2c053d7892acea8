#!/usr/bin/env bash
# SmolLM2-135M generation speed on the GPU machine (see ../shared/gpu/README.md), from the
# GGUF's quantized weights: adeadvm (cpu and vulkan backends) beside PyTorch (CPU and CUDA, fp32
# eager, and CUDA graphs) and llama.cpp (CPU), with the decode roofline. The model file cannot
# be carried there (98 MB; the limit is 64 MiB), so its header is, and benches/gguf_skeleton.py
# expands it into a GGUF of the same types and shapes with synthetic weights: the same work a
# token, meaningless text.
#
# Build and carry from here (about 45 MB):
#   cargo build --release && benches/build-llamacpp.sh
#   python3 benches/gguf_skeleton.py shrink ~/.cache/adeadvm/smollm2-135m-instruct/SmolLM2-135M-Instruct.Q4_1.gguf \
#       target/llamacpp/smollm2-135m-instruct.skel
#   carry: .gl target/release/adeadvm target/llamacpp/llamacpp-bin.tar.gz target/llamacpp/smollm2-135m-instruct.skel
# There, from the project root with $OUT set, one stage a call (each fits the 10-minute limit):
#   benches/device_smollm2.sh adeadvm     # bandwidth (STREAM add) and adeadvm's own figures
#   benches/device_smollm2.sh torch       # PyTorch beside adeadvm (benches/peer_smollm2.py)
#   benches/device_smollm2.sh llamacpp    # llama.cpp beside adeadvm's cpu backend
# The program is assembled with CTX = 256 (prompt 128 + 128 generated), the context the peers
# allocate too. THREADS (default 16) is the CPU thread count of every engine.
set -u
stage=${1:?usage: device_smollm2.sh adeadvm|torch|llamacpp}
T=${THREADS:-16}
for f in .gl/*.deb; do dpkg -x "$f" / ; done; ldconfig
printf '{"file_format_version":"1.0.0","ICD":{"library_path":"libEGL_nvidia.so.0","api_version":"1.4.312"}}' > /tmp/egl_icd.json
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
B=$PWD/target/release/adeadvm
$B info > "$OUT/info.txt" 2>&1 || { export VK_DRIVER_FILES=/tmp/egl_icd.json; $B info > "$OUT/info.txt" 2>&1; }
W=/tmp/smollm2_synthetic.gguf
[ -f $W ] || python3 benches/gguf_skeleton.py expand target/llamacpp/smollm2-135m-instruct.skel $W > "$OUT/expand.txt" 2>&1
Q=/tmp/smollm2_q.bib
[ -f $Q ] || $B asm programs/smollm2.s -D WEIGHTS=$W -D CTX=256 -o $Q > "$OUT/asm.txt" 2>&1
ls -l $W $Q >> "$OUT/asm.txt"

case $stage in
adeadvm)
  nvidia-smi --query-gpu=name,driver_version --format=csv > "$OUT/gpu.txt"
  lscpu | head -20 > "$OUT/cpu.txt"
  # The machine's memory bandwidth, STREAM's add (12 bytes an element), in the same run.
  $B bench add 64M --threads "$T" --iters 20 > "$OUT/bw_cpu.txt" 2>&1
  $B bench add 64M --backend vulkan --iters 20 > "$OUT/bw_gpu.txt" 2>&1
  P=$(python3 -c "import numpy as np; r=np.random.default_rng(0); print(','.join(map(str, r.integers(300, 49152, size=128).tolist())))")
  for be in cpu vulkan; do
    for b in 1 8; do
      args=()
      for _ in $(seq $b); do args+=(--prompt-ids "$P"); done
      for tier in run1 run2; do
        $B generate $Q "${args[@]}" --max-tokens 128 --ignore-eos --json --backend $be --threads "$T" \
          > "$OUT/gen_${be}_b${b}_$tier.json" 2> "$OUT/gen_${be}_b${b}_$tier.err"
      done
    done
  done
  ;;
torch)
  python3 benches/peer_smollm2.py --model $W --bib $Q --no-check --threads "$T" --devices cpu,cuda \
    --backends cpu,vulkan --batches 1,8 --iters 3 --json-out "$OUT/peer_torch.json" > "$OUT/peer_torch.txt" 2>&1
  ;;
llamacpp)
  python3 benches/peer_llamacpp.py --model $W --adeadvm $Q --threads "$T" --iters 3 \
    --json-out "$OUT/peer_llamacpp.json" > "$OUT/peer_llamacpp.txt" 2>&1
  ;;
esac
echo "stage $stage done" >> "$OUT/done.txt"
