#!/usr/bin/env python3
"""all-MiniLM-L6-v2 on adeadvm beside ONNX Runtime, same weights, same machine, same run.

    dir=$(scripts/fetch-minilm.sh)
    cargo build --release                       # the CLI (to assemble) and the C library
    pip install onnx onnxruntime numpy
    python3 benches/peer_minilm.py [--threads 2] [--iters 20] [--quick] [--cpu-time]

The ONNX graph is written here by hand with onnx.helper from the model's model.safetensors (no
PyTorch, no exporter): the BERT encoder as Hugging Face's BertModel computes it, mean pooling
and L2 normalisation, the same computation as programs/minilm_l6.s but written independently.
ONNX Runtime runs it on the CPU with `--threads` intra-op threads (default 2) and every graph
optimization on; adeadvm runs programs/minilm_l6.s (assembled with the same weights) through
the Python binding with the same number of threads, in the strict and the fast tier.

Both are timed the same way: the median wall time of `--iters` calls on the same inputs, after
one warm-up call, the three (ORT, strict, fast) called in turn so that each sees the same load;
each call takes numpy inputs and returns numpy outputs. The ratio is ORT's
time over adeadvm's: above 1 means adeadvm is faster. The script also checks that ONNX Runtime's
embeddings agree with adeadvm's within 1e-4 (an independent check of the architecture) and
exits 1 if they do not.
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))

D, HEADS, HD, FF, LAYERS = 384, 12, 32, 1536, 6
# Seconds between timed calls, longer than a thread pool spins before it sleeps.
PAUSE_S = 0.02


def read_safetensors(path):
    """{name: np.ndarray} for the F32 tensors of a .safetensors file (no extra package)."""
    with open(path, "rb") as f:
        n = int.from_bytes(f.read(8), "little")
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__" or info["dtype"] != "F32":
            continue
        a, b = info["data_offsets"]
        out[name] = np.frombuffer(data[a:b], dtype="<f4").reshape(info["shape"])
    return out


def build_onnx(weights):
    """The model as an ONNX graph: inputs input_ids, attention_mask int32[B, T]; output embedding."""
    from onnx import TensorProto, helper, numpy_helper

    nodes, inits = [], []
    counter = [0]

    def name(prefix):
        counter[0] += 1
        return "%s_%d" % (prefix, counter[0])

    def const(array, prefix="c"):
        n = name(prefix)
        inits.append(numpy_helper.from_array(np.ascontiguousarray(array), n))
        return n

    def op(kind, inputs, **attrs):
        out = name(kind.lower())
        nodes.append(helper.make_node(kind, inputs, [out], **attrs))
        return out

    def linear(x, prefix):
        # torch.nn.Linear stores [out, in]: x @ W^T + b (W^T stored, as exporters do)
        w = const(weights[prefix + ".weight"].T.copy(), "w")
        b = const(weights[prefix + ".bias"], "b")
        return op("Add", [op("MatMul", [x, w]), b])

    def layernorm(x, prefix):
        g = const(weights[prefix + ".weight"], "g")
        b = const(weights[prefix + ".bias"], "beta")
        return op("LayerNormalization", [x, g, b], axis=-1, epsilon=1e-12)

    i64 = lambda v: const(np.array(v, dtype=np.int64), "shape")
    f32 = lambda v: const(np.array(v, dtype=np.float32), "k")

    # embeddings: word[ids] + type[0] + pos[0:T]
    word = op("Gather", [const(weights["embeddings.word_embeddings.weight"], "word"), "input_ids"], axis=0)
    t = op("Shape", ["input_ids"], start=1, end=2)  # [T]
    pos = op("Slice", [const(weights["embeddings.position_embeddings.weight"], "pos"), i64([0]), t, i64([0])])
    x = op("Add", [op("Add", [word, const(weights["embeddings.token_type_embeddings.weight"][0], "type0")]), pos])
    x = layernorm(x, "embeddings.LayerNorm")

    # additive mask [B, 1, 1, T]: (1 - mask) * float32 min
    maskf = op("Cast", ["attention_mask"], to=TensorProto.FLOAT)
    madd = op("Mul", [op("Sub", [f32(1.0), maskf]), f32(np.finfo(np.float32).min)])
    madd = op("Unsqueeze", [madd, i64([1, 2])])

    heads = i64([0, 0, HEADS, HD])
    merged = i64([0, 0, D])
    for l in range(LAYERS):
        p = "encoder.layer.%d." % l
        q = op("Transpose", [op("Reshape", [linear(x, p + "attention.self.query"), heads])], perm=[0, 2, 1, 3])
        k = op("Transpose", [op("Reshape", [linear(x, p + "attention.self.key"), heads])], perm=[0, 2, 3, 1])
        v = op("Transpose", [op("Reshape", [linear(x, p + "attention.self.value"), heads])], perm=[0, 2, 1, 3])
        s = op("Add", [op("Div", [op("MatMul", [q, k]), f32(np.sqrt(HD))]), madd])
        ctx = op("MatMul", [op("Softmax", [s], axis=-1), v])
        ctx = op("Reshape", [op("Transpose", [ctx], perm=[0, 2, 1, 3]), merged])
        a = layernorm(op("Add", [linear(ctx, p + "attention.output.dense"), x]), p + "attention.output.LayerNorm")
        h = linear(a, p + "intermediate.dense")
        h = op("Mul", [op("Mul", [h, f32(0.5)]), op("Add", [f32(1.0), op("Erf", [op("Div", [h, f32(np.sqrt(2.0))])])])])
        x = layernorm(op("Add", [linear(h, p + "output.dense"), a]), p + "output.LayerNorm")

    # mean pooling over the mask, then x / max(|x|, 1e-12)
    m3 = op("Unsqueeze", [maskf, i64([2])])
    total = op("ReduceSum", [op("Mul", [x, m3]), i64([1])], keepdims=0)
    count = op("Max", [op("ReduceSum", [maskf, i64([1])], keepdims=1), f32(1e-9)])
    mean = op("Div", [total, count])
    norm = op("Max", [op("Sqrt", [op("ReduceSum", [op("Mul", [mean, mean]), i64([1])], keepdims=1)]), f32(1e-12)])
    nodes.append(helper.make_node("Div", [mean, norm], ["embedding"]))

    graph = helper.make_graph(
        nodes,
        "all-MiniLM-L6-v2",
        [
            helper.make_tensor_value_info("input_ids", TensorProto.INT32, ["B", "T"]),
            helper.make_tensor_value_info("attention_mask", TensorProto.INT32, ["B", "T"]),
        ],
        [helper.make_tensor_value_info("embedding", TensorProto.FLOAT, ["B", D])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], producer_name="peer_minilm.py")
    model.ir_version = 8
    return model


def inputs(batch, seq, seed):
    """Random token ids ([CLS] ... [SEP]) and masks; rows after the first have random lengths."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((batch, seq), np.int32)
    mask = np.zeros((batch, seq), np.int32)
    for b in range(batch):
        n = seq if b == 0 else int(rng.integers(seq // 4, seq + 1))
        ids[b, :n] = rng.integers(1000, 30000, n)
        ids[b, 0], ids[b, n - 1] = 101, 102
        mask[b, :n] = 1
    return ids, mask


def median_times(fns, iters, clock=time.perf_counter):
    """The median time of each function, calls interleaved round-robin so that all of them see
    the same machine load (this matters on a shared machine). Each call starts after a pause
    of PAUSE_S: ONNX Runtime's intra-op threads spin for a while after a call returns, and
    without the pause they held the cores during the next engine's call (adeadvm strict on 2
    threads measured 54 ms right after ORT's call, 31 ms on its own)."""
    for fn in fns:
        fn()  # warm-up: first-call allocations, plan caches
    times = [[] for _ in fns]
    for _ in range(iters):
        for fn, ts in zip(fns, times):
            time.sleep(PAUSE_S)
            t = clock()
            fn()
            ts.append(clock() - t)
    return [statistics.median(ts) for ts in times]


def cpu_name():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cache = os.environ.get("ADEADVM_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "adeadvm")
    p.add_argument("--model", default=os.path.join(cache, "minilm"), help="folder with model.safetensors")
    p.add_argument("--binary", default=str(ROOT / "target" / "release" / "adeadvm"))
    p.add_argument("--threads", type=int, default=2, help="threads for both (default 2)")
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--quick", action="store_true", help="fewer repetitions")
    p.add_argument(
        "--cpu-time",
        action="store_true",
        help="one thread each, timed by the calling thread's CPU time (time.thread_time): both "
        "run their kernels on the calling thread then, so waiting for a busy shared machine's "
        "cores does not count",
    )
    p.add_argument("--save-onnx", help="also write the ONNX model to this file")
    p.add_argument(
        "--export",
        metavar="FILE.onnx",
        help="only write the ONNX model to this file, and example inputs (ids.npy, mask.npy: B=2, T=16) "
        "beside it, then exit (needs onnx, not onnxruntime)",
    )
    args = p.parse_args()
    if args.export:
        try:
            import onnx
        except ImportError:
            sys.exit("peer_minilm.py: --export needs onnx: pip install onnx")
        weights_path = os.path.join(args.model, "model.safetensors")
        if not os.path.exists(weights_path):
            sys.exit("peer_minilm.py: %s not found: run scripts/fetch-minilm.sh" % weights_path)
        onnx.save(build_onnx(read_safetensors(weights_path)), args.export)
        folder = os.path.dirname(os.path.abspath(args.export))
        ids, mask = inputs(2, 16, seed=0)
        np.save(os.path.join(folder, "ids.npy"), ids)
        np.save(os.path.join(folder, "mask.npy"), mask)
        print("wrote %s, ids.npy and mask.npy" % args.export)
        return
    iters = 5 if args.quick else args.iters
    if args.cpu_time:
        args.threads = 1
    clock = time.thread_time if args.cpu_time else time.perf_counter

    try:
        import onnx  # noqa: F401
        import onnxruntime as ort
    except ImportError:
        sys.exit("peer_minilm.py: onnx and onnxruntime are needed: pip install onnx onnxruntime")
    import adeadvm

    weights_path = os.path.join(args.model, "model.safetensors")
    if not os.path.exists(weights_path):
        sys.exit("peer_minilm.py: %s not found: run scripts/fetch-minilm.sh" % weights_path)
    if not os.path.exists(args.binary):
        sys.exit("peer_minilm.py: %s not found: run `cargo build --release` first" % args.binary)

    with tempfile.TemporaryDirectory() as tmp:
        bib = os.path.join(tmp, "minilm.bib")
        asm = subprocess.run(
            [args.binary, "asm", str(ROOT / "programs" / "minilm_l6.s"), "-D", "WEIGHTS=" + os.path.abspath(weights_path), "-o", bib],
            capture_output=True,
            text=True,
        )
        if asm.returncode != 0:
            sys.exit("peer_minilm.py: assembling programs/minilm_l6.s failed:\n" + asm.stderr)
        vms = {tier: adeadvm.load(bib, backend="cpu", tier=tier, threads=args.threads) for tier in ("strict", "fast")}

    model = build_onnx(read_safetensors(weights_path))
    if args.save_onnx:
        onnx.save(model, args.save_onnx)
    # The same graph through `adeadvm import`: its speed against the hand-written program's.
    with tempfile.TemporaryDirectory() as tmp:
        onnx_path = os.path.join(tmp, "minilm.onnx")
        onnx.save(model, onnx_path)
        bib = os.path.join(tmp, "imported.bib")
        imp = subprocess.run([args.binary, "import", onnx_path, "-o", bib], capture_output=True, text=True)
        if imp.returncode != 0:
            sys.exit("peer_minilm.py: adeadvm import failed:\n" + imp.stderr)
        imported = adeadvm.load(bib, backend="cpu", tier="strict", threads=args.threads)
    so = ort.SessionOptions()
    so.intra_op_num_threads = args.threads
    so.inter_op_num_threads = 1
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])

    print(
        "machine: %s, %d cores; %s thread(s) each; timed by %s"
        % (cpu_name(), os.cpu_count() or 0, args.threads, "thread CPU time" if args.cpu_time else "wall time")
    )
    print("onnxruntime %s (ORT_ENABLE_ALL), numpy %s; median of %d calls" % (ort.__version__, np.__version__, iters))
    print("ratio = ORT time / adeadvm time (>1: adeadvm faster); imported: the ONNX graph through")
    print("`adeadvm import` (strict), its time as a ratio of programs/minilm_l6.s's strict time (<1: slower)")
    print(
        "%-11s %10s %10s %7s %10s %7s %12s %7s   %s"
        % ("shape", "ORT ms", "strict ms", "ratio", "fast ms", "ratio", "imported ms", "ratio", "max |ORT - adeadvm|")
    )
    ok = True
    for batch, seq in [(1, 128), (8, 128)]:
        ids, mask = inputs(batch, seq, seed=batch)
        feed = {"input_ids": ids, "attention_mask": mask}
        ort_out = sess.run(["embedding"], feed)[0]
        diffs = [float(np.abs(vms[tier].run(**feed)["embedding"] - ort_out).max()) for tier in ("strict", "fast")]
        same = np.array_equal(imported.run(**feed)["embedding"], vms["strict"].run(**feed)["embedding"])
        t_ort, t_strict, t_fast, t_imp = median_times(
            [
                lambda: sess.run(["embedding"], feed),
                lambda: vms["strict"].run(**feed),
                lambda: vms["fast"].run(**feed),
                lambda: imported.run(**feed),
            ],
            iters,
            clock,
        )
        row = "B=%d,T=%-5d %10.2f" % (batch, seq, t_ort * 1e3)
        for t in (t_strict, t_fast):
            row += " %10.2f %6.2fx" % (t * 1e3, t_ort / t)
        row += " %12.2f %6.2fx" % (t_imp * 1e3, t_strict / t_imp)
        if not same:
            print("peer_minilm.py: the imported program's embeddings differ from minilm_l6.s's", file=sys.stderr)
            ok = False
        row += "   strict %.1e, fast %.1e" % tuple(diffs)
        print(row, flush=True)
        if max(diffs) > 1e-4:
            ok = False
    if not ok:
        print("peer_minilm.py: ONNX Runtime and adeadvm disagree by more than 1e-4", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
