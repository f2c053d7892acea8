#!/usr/bin/env python3
"""all-MiniLM-L6-v2 (random weights of its shapes) over several devices: throughput of one batch
split over them (`devices=`) and of the model cut into stages (`pipeline=`), against one device.

    cargo build --release
    python3 benches/multi_device.py --batches 256,1024 --setups "gpu0;gpu0,gpu1;gpu0,gpu1,cpu"
    python3 benches/multi_device.py --setups "gpu0;pipeline:gpu0,gpu1;pipeline:gpu0,gpu1/8"

Each setup is a device list for `devices=` (one batch split over them, in proportion to their
measured speed), `pipeline:LIST` (the model cut into one stage per device), or
`pipeline:LIST/N` (the same with N micro-batches flowing through the stages at once). The first
setup is the baseline: every other row gives its throughput as a ratio to it, and is checked to
give the baseline's embeddings bit for bit (strict tier, the default; `--tier fast` lets each
device give its own fast bits, so there the check is off). Each time is the median of --iters
runs after --warmup runs (a split's shares settle during the warm-up). Exits 1 when a setup's
embeddings differ.
"""

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import adeadvm  # noqa: E402
from peer_minilm import inputs  # noqa: E402
from peer_minilm_torch import random_weights, write_safetensors  # noqa: E402


def session(bib, setup, tier):
    if setup.startswith("pipeline:"):
        spec = setup[len("pipeline:"):]
        places, _, micro = spec.partition("/")
        return adeadvm.load(bib, tier=tier, pipeline=places, micro_batches=int(micro) if micro else None)
    # One place ("gpu0") is a split over one device: the plain session on it.
    return adeadvm.load(bib, tier=tier, devices=setup)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="256,1024")
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--setups", default="gpu0;gpu0,gpu1;gpu0,gpu1,cpu")
    ap.add_argument("--tier", default="strict", choices=["strict", "fast"])
    ap.add_argument("--iters", type=int, default=7)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--binary", default=str(ROOT / "target/release/adeadvm"))
    ap.add_argument("--program", default=str(ROOT / "programs/minilm_l6.s"))
    ap.add_argument("--define", action="append", default=[], help="NAME=VALUE for the assembler (a smaller model)")
    ap.add_argument("--weights", help="a safetensors file (default: random weights of MiniLM's shapes)")
    a = ap.parse_args()
    setups = a.setups.split(";")
    with tempfile.TemporaryDirectory() as tmp:
        weights = a.weights
        if weights is None:
            weights = str(Path(tmp) / "w.safetensors")
            write_safetensors(weights, random_weights())
        bib = str(Path(tmp) / "model.bib")
        defines = [arg for d in a.define for arg in ("-D", d)]
        subprocess.run([a.binary, "asm", a.program, "-D", "WEIGHTS=" + weights, *defines, "-o", bib], check=True,
                       stdout=subprocess.DEVNULL)
        print("| batch | setup | ms per batch | sentences/s | vs %s | same bits |" % setups[0])
        print("| --- | --- | --- | --- | --- | --- |")
        ok = True
        for b in [int(x) for x in a.batches.split(",")]:
            ids, mask = inputs(b, a.seq, seed=b)
            base_time, base_out = None, None
            for setup in setups:
                vm = session(bib, setup, a.tier)
                for _ in range(a.warmup):
                    out = vm.run(input_ids=ids, attention_mask=mask)["embedding"]
                ts = []
                for _ in range(a.iters):
                    t = time.perf_counter()
                    out = vm.run(input_ids=ids, attention_mask=mask)["embedding"]
                    ts.append(time.perf_counter() - t)
                med = sorted(ts)[len(ts) // 2]
                if base_time is None:
                    base_time, base_out = med, out
                same = out.tobytes() == base_out.tobytes()
                check = "yes" if same else ("(fast tier)" if a.tier == "fast" else "NO")
                ok &= same or a.tier == "fast"
                print("| %d | %s | %.2f | %.0f | %.2fx | %s |" % (b, setup, med * 1e3, b / med, base_time / med, check),
                      flush=True)
                del vm
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
