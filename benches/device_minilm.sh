#!/usr/bin/env bash
# MiniLM (programs/minilm_l6.s, random weights of its shapes) on the GPU machine (see
# ../shared/gpu/README.md): adeadvm beside PyTorch on its 16-core host and on the GPU.
#
# Build and carry from here (about 50 MB):
#   cargo build --release && ../shared/gpu/fetch-vulkan-loader.sh
#   carry: .gl target/release/adeadvm target/release/libadeadvm.so
# There, from the project root with $OUT set, one stage a call (each fits the 10-minute limit):
#   benches/device_minilm.sh table      # benches/peer_minilm_torch.py: the README's table
#   benches/device_minilm.sh profile    # per-opcode profiles at 1 and 16 threads, SGEMM beside MKL
# THREADS (default: every core) is the CPU thread count of every engine; ADEADVM_BIN and
# ADEADVM_LIB name another build (e.g. a baseline), TAG suffixes the table's files, CPU_RUNS
# and TABLE_ARGS pass --cpu-runs and more options to peer_minilm_torch.py, PROFILE_RUNS lists
# the profile stage's THREADS:BATCH runs.
set -u
stage=${1:?usage: device_minilm.sh table|profile}
T=${THREADS:-$(nproc)}
for f in .gl/*.deb; do dpkg -x "$f" / ; done; ldconfig
printf '{"file_format_version":"1.0.0","ICD":{"library_path":"libEGL_nvidia.so.0","api_version":"1.4.312"}}' > /tmp/egl_icd.json
export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
B=${ADEADVM_BIN:-$PWD/target/release/adeadvm}
$B info > "$OUT/info.txt" 2>&1 || { export VK_DRIVER_FILES=/tmp/egl_icd.json; $B info > "$OUT/info.txt" 2>&1; }
grep -q -i nvidia "$OUT/info.txt" || { export VK_DRIVER_FILES=/tmp/egl_icd.json; $B info > "$OUT/info.txt" 2>&1; }
export ADEADVM_LIB=${ADEADVM_LIB:-$PWD/target/release/libadeadvm.so}

case $stage in
table)
  python3 benches/peer_minilm_torch.py --random-weights --binary "$B" --iters "${ITERS:-15}" \
    --cpu-runs "${CPU_RUNS:-${T}x1,${T}x8,${T}x32,1x32}" ${TABLE_ARGS:-} \
    --json "$OUT/minilm_torch${TAG:-}.json" > "$OUT/minilm_torch${TAG:-}.txt" 2>&1
  ;;
profile)
  W=/tmp/minilm_random.safetensors
  python3 -c "
import sys; sys.path.insert(0, 'benches')
from peer_minilm_torch import random_weights, write_safetensors
write_safetensors('$W', random_weights())
from peer_minilm import inputs
import numpy as np
for b in (1, 8, 32):
    ids, mask = inputs(b, 128, seed=b)
    np.save('/tmp/ids%d.npy' % b, ids); np.save('/tmp/mask%d.npy' % b, mask)
"
  $B asm programs/minilm_l6.s -D WEIGHTS=$W -o /tmp/minilm.bib > "$OUT/asm.txt" 2>&1
  for tier in fast strict; do
    for run in ${PROFILE_RUNS:-$T:1 $T:8 $T:32 1:32}; do
      set -- ${run/:/ }
      $B run /tmp/minilm.bib --backend cpu --threads "$1" --tier $tier --profile \
        --input input_ids=/tmp/ids$2.npy --input attention_mask=/tmp/mask$2.npy \
        > /dev/null 2> "$OUT/profile_${tier}_t$1_b$2.txt"
    done
  done
  for n in 1024 4096; do
    $B bench matmul $n --threads "$T" --tier fast --json > "$OUT/sgemm_fast_$n.json" 2>&1
    $B bench matmul $n --threads "$T" --tier strict --json > "$OUT/sgemm_strict_$n.json" 2>&1
  done
  python3 -c "
import time, torch
torch.set_num_threads($T)
for n in (1024, 4096):
    a, b = torch.rand(n, n), torch.rand(n, n)
    for _ in range(3): a @ b
    ts = []
    for _ in range(10):
        t = time.perf_counter(); a @ b; ts.append(time.perf_counter() - t)
    ts.sort(); print('torch matmul %d: %.1f GFLOP/s' % (n, 2 * n**3 / ts[5] / 1e9))
" > "$OUT/sgemm_torch.txt" 2>&1
  ;;
esac
echo "stage $stage done" >> "$OUT/done.txt"
