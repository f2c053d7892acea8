#!/usr/bin/env python3
"""SmolLM2-135M-Instruct text generation on llama.cpp's CPU backend, from the same GGUF
(Q4_1), optionally beside adeadvm's cpu backend in the same command: tokens/s of prompt
processing and generation at batch 1 and 8, and the ratios adeadvm / llama.cpp.

    benches/build-llamacpp.sh                 # once: target/llamacpp/bin/{avx2,avx512}/
    cargo build --release                     # for --adeadvm
    python3 benches/peer_llamacpp.py [--model FILE.gguf | --skel FILE.skel] [--threads T]
                                     [--batches 1,8] [--prompt-len 128] [--gen 128] [--iters 3]
                                     [--adeadvm auto|BIB] [--json-out FILE]

llama.cpp (as vendored in the pinned llama-cpp-python sdist, built by benches/build-llamacpp.sh:
static, CPU only, an AVX2 and an AVX-512 copy, the copy picked here by /proc/cpuinfo) is run
through its own benchmark tools, with their default settings otherwise (flash attention "auto",
n_batch 2048, n_ubatch 512, mmap), on `--threads` threads (default: every core):
  * llama-bench -p PROMPT -n GEN -t T -r ITERS -o json: batch 1; prompt processing of PROMPT
    tokens, and generation of GEN tokens one at a time *from an empty context* (its tg figure);
    the median of its ITERS samples (after its own warm-up run).
  * llama-batched-bench -npp PROMPT -ntg GEN -npl 1,8 -c 8*(PROMPT+GEN) -t T --output-format
    jsonl: B sequences, each with its own PROMPT-token prompt (not shared), then GEN steps each
    decoding one token for all B sequences; S_PP = B*PROMPT / prompt time, S_TG = B*GEN /
    generation time. Run ITERS times, medians. Generation follows the prompt in the same
    sequences, as in adeadvm's run, so the ratios are taken against these figures (batch 1
    also against llama-bench).
Both tools feed random token ids and never sample; the work per token is the model's.

adeadvm (--adeadvm): `adeadvm generate BIB --prompt-ids ... --max-tokens GEN --ignore-eos --json
--backend cpu --threads T`, with peer_smollm2.py's helpers: the prompt (PROMPT ids drawn with
peer_smollm2.py's seed from the ordinary vocabulary) given B times for batch B, one warm-up, the
median of ITERS runs of its "prompt_tokens_per_s" and "gen_tokens_per_s". `--adeadvm auto`
assembles programs/smollm2.s from the same GGUF that llama.cpp loads (CLI: ADEADVM_BIN, else
target/release/adeadvm; --adeadvm-bin). Ratios above 1: adeadvm faster.

The model: --model, else ADEADVM_SMOLLM2_GGUF, else the file scripts/fetch-smollm2.sh caches,
else --skel (default target/llamacpp/smollm2-135m-instruct.skel where present) expanded with
benches/gguf_skeleton.py into a temporary GGUF of the same header with synthetic weights of the
same types: the same work, meaningless text. Measured on a 2-core machine (see docs/peers.md),
the synthetic file runs llama-bench at the real file's speed.

Where the model can't go (the GPU machine: nothing reaches the network, what is carried is at
most 64 MiB, the model is 98 MB): build here, shrink the model to its header, carry both:
    benches/build-llamacpp.sh
    python3 benches/gguf_skeleton.py shrink MODEL.gguf target/llamacpp/smollm2-135m-instruct.skel
    # carry target/llamacpp/llamacpp-bin.tar.gz (19 MB: bin/, unpacked there on first use)
    # and target/llamacpp/smollm2-135m-instruct.skel (1.8 MB)
    # there: cargo build --release && python3 benches/peer_llamacpp.py --adeadvm auto --json-out $OUT/llamacpp.json
The binaries are static (no glibc dependency); python3 with numpy is all the far side needs
beyond them. On a machine shared with builds, use medians of several runs (--iters) and a
thread count that leaves the builds room (the figures at -t 1 are the steadier).
"""

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benches"))

import gguf_skeleton  # noqa: E402
import peer_smollm2 as peer  # noqa: E402

DEFAULT_BIN = ROOT / "target" / "llamacpp" / "bin"
CARRIED_BIN = ROOT / "target" / "llamacpp" / "llamacpp-bin.tar.gz"  # bin/, as build-llamacpp.sh packs it
DEFAULT_SKEL = ROOT / "target" / "llamacpp" / "smollm2-135m-instruct.skel"
CACHED_MODEL = Path.home() / ".cache" / "adeadvm" / "smollm2-135m-instruct" / "SmolLM2-135M-Instruct.Q4_1.gguf"
# The copies benches/build-llamacpp.sh builds, best first, with the CPU flags each needs.
VARIANTS = [
    ("avx512", {"avx2", "fma", "f16c", "bmi2", "avx512f", "avx512cd", "avx512vl", "avx512dq", "avx512bw"}),
    ("avx2", {"avx2", "fma", "f16c", "bmi2"}),
]


def cpu_flags():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                return set(line.split(":", 1)[1].split())
    except OSError:
        pass
    return set()


def cpu_name():
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def llamacpp_bin(args):
    """The folder holding llama-bench and llama-batched-bench, and the variant's name."""
    base = Path(args.llamacpp or os.environ.get("LLAMACPP_BIN") or DEFAULT_BIN)
    if base == DEFAULT_BIN and not base.is_dir() and CARRIED_BIN.is_file():
        print("unpacking %s" % CARRIED_BIN, file=sys.stderr)
        with tarfile.open(CARRIED_BIN) as tar:
            tar.extractall(DEFAULT_BIN.parent)
    if (base / "llama-bench").is_file():
        return base, base.name
    flags = cpu_flags()
    for name, needs in VARIANTS:
        if args.variant and name != args.variant:
            continue
        if (args.variant or needs <= flags) and (base / name / "llama-bench").is_file():
            return base / name, name
    sys.exit("no llama.cpp binaries for this CPU under %s (benches/build-llamacpp.sh, or --llamacpp DIR)" % base)


def find_gguf(args, tmp):
    """(path of the GGUF both engines load, whether its weights are synthetic)."""
    if args.model:
        return Path(args.model), False
    if not args.skel:
        if os.environ.get("ADEADVM_SMOLLM2_GGUF"):
            return Path(os.environ["ADEADVM_SMOLLM2_GGUF"]), False
        if CACHED_MODEL.is_file():
            return CACHED_MODEL, False
    skel = Path(args.skel) if args.skel else DEFAULT_SKEL
    if skel.is_file():
        out = Path(tmp) / (skel.stem + ".synthetic.gguf")
        gguf_skeleton.expand(str(skel), str(out), args.seed)
        return out, True
    return peer.find_model(argparse.Namespace(model=None)), False


def run_tool(cmd):
    run = subprocess.run(cmd, capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit("%s failed (exit %d):\n%s" % (Path(cmd[0]).name, run.returncode, (run.stderr + run.stdout).strip()[-3000:]))
    return run


def llama_bench(exe, model, args):
    """[(batch 1, prompt tok/s, gen tok/s, details)] from llama-bench's JSON samples."""
    cmd = [str(exe), "-m", str(model), "-p", str(args.prompt_len), "-n", str(args.gen), "-t", str(args.threads), "-r", str(args.iters), "-o", "json"]
    out = json.loads(run_tool(cmd).stdout)
    pp = next(r for r in out if r["n_prompt"] == args.prompt_len and r["n_gen"] == 0)
    tg = next(r for r in out if r["n_prompt"] == 0 and r["n_gen"] == args.gen)
    info = {k: pp.get(k) for k in ("build_commit", "build_number", "cpu_info", "n_threads", "flash_attn", "n_batch", "n_ubatch", "type_k", "model_type")}
    return statistics.median(pp["samples_ts"]), statistics.median(tg["samples_ts"]), info


def batched_bench(exe, model, args, batches):
    """{batch: (prompt tok/s, gen tok/s)}: medians over --iters runs of llama-batched-bench."""
    ctx = max(batches) * (args.prompt_len + args.gen)
    cmd = [str(exe), "-m", str(model), "-c", str(ctx), "-npp", str(args.prompt_len), "-ntg", str(args.gen),
           "-npl", ",".join(map(str, batches)), "-t", str(args.threads), "--output-format", "jsonl"]
    samples = {b: [] for b in batches}
    info = {}
    for _ in range(args.iters):
        run = run_tool(cmd)
        for line in (run.stdout + "\n" + run.stderr).splitlines():
            line = line.strip()
            if line.startswith("{") and "speed_pp" in line:
                r = json.loads(line)
                samples[r["pl"]].append((r["speed_pp"], r["speed_tg"]))
                info = {k: r.get(k) for k in ("n_kv_max", "n_batch", "n_ubatch", "flash_attn", "n_threads")}
    missing = [b for b in batches if not samples[b]]
    if missing:
        sys.exit("llama-batched-bench printed no result for batch %s" % missing)
    return {b: (statistics.median(s[0] for s in v), statistics.median(s[1] for s in v)) for b, v in samples.items()}, info


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", help="the SmolLM2 .gguf (default: ADEADVM_SMOLLM2_GGUF, the cached download, else --skel)")
    ap.add_argument("--skel", help="a skeleton from gguf_skeleton.py shrink, expanded with synthetic weights (default %s)" % DEFAULT_SKEL.relative_to(ROOT))
    ap.add_argument("--seed", type=int, default=0, help="seed of the synthetic weights")
    ap.add_argument("--llamacpp", help="folder of llama-bench and llama-batched-bench, or of their avx2/avx512 copies (default: LLAMACPP_BIN, else %s)" % DEFAULT_BIN.relative_to(ROOT))
    ap.add_argument("--variant", choices=[v for v, _ in VARIANTS], help="which copy (default: the best this CPU runs)")
    ap.add_argument("--threads", type=int, default=os.cpu_count(), help="threads for both engines (default: every core, %d here)" % os.cpu_count())
    ap.add_argument("--batches", default="1,8", help="batch sizes (parallel sequences)")
    ap.add_argument("--prompt-len", type=int, default=128)
    ap.add_argument("--gen", type=int, default=128, help="tokens generated per sequence")
    ap.add_argument("--iters", type=int, default=3, help="timed runs per figure (median)")
    ap.add_argument("--no-llama-bench", action="store_true", help="llama-batched-bench only")
    ap.add_argument("--adeadvm", metavar="BIB", help="also run adeadvm: an assembled programs/smollm2.s, or 'auto' to assemble it from the model")
    ap.add_argument("--adeadvm-bin", help="the adeadvm CLI (default: ADEADVM_BIN, else target/release/adeadvm)")
    ap.add_argument("--adeadvm-arg", action="append", default=[], help="extra argument for adeadvm generate (repeatable)")
    ap.add_argument("--json-out", help="write the figures as JSON here")
    args = ap.parse_args()
    batches = [int(b) for b in args.batches.split(",") if b]

    bindir, variant = llamacpp_bin(args)
    version = (bindir.parent / "VERSION").read_text().splitlines()[0] if (bindir.parent / "VERSION").is_file() else "unknown"
    tmp = tempfile.TemporaryDirectory()
    model, synthetic = find_gguf(args, tmp.name)
    header, _ = gguf_skeleton.read_header(str(model))
    vocab = int(header.meta["llama.vocab_size"])
    machine = "%s, %d cores" % (cpu_name(), os.cpu_count())
    print("llama.cpp: %s, %s copy (%s)" % (version, variant, bindir), file=sys.stderr)
    print("model: %s%s; %s; %d threads" % (model, " (synthetic weights)" if synthetic else "", machine, args.threads), file=sys.stderr)

    rows = []  # (engine, tool, batch, prompt tok/s, gen tok/s)
    details = {}
    if not args.no_llama_bench:
        pp, tg, info = llama_bench(bindir / "llama-bench", model, args)
        rows.append(("llama.cpp", "llama-bench", 1, pp, tg))
        details["llama-bench"] = info
        print("llama-bench done", file=sys.stderr)
    figures, info = batched_bench(bindir / "llama-batched-bench", model, args, batches)
    details["llama-batched-bench"] = info
    for b in batches:
        rows.append(("llama.cpp", "batched-bench", b) + figures[b])
    print("llama-batched-bench done", file=sys.stderr)

    if args.adeadvm:
        exe = peer.adeadvm_cmd(argparse.Namespace(adeadvm=args.adeadvm_bin))
        bib = args.adeadvm
        if bib == "auto":
            bib = Path(tmp.name) / "smollm2.bib"
            cmd = [exe, "asm", str(ROOT / "programs" / "smollm2.s"), "-D", "WEIGHTS=%s" % model, "-o", str(bib)]
            run = subprocess.run(cmd, capture_output=True, text=True)
            if run.returncode != 0:
                sys.exit("assembling programs/smollm2.s failed: %s" % run.stderr.strip()[-2000:])
        rng = np.random.default_rng(0)  # peer_smollm2.py's prompt
        prompt_ids = rng.integers(peer.FIRST_ORDINARY_ID, vocab, size=args.prompt_len).tolist()
        extra = ["--threads", str(args.threads)] + args.adeadvm_arg
        for b in batches:
            runs = [peer.adeadvm_run(exe, bib, prompt_ids, args.gen, "cpu", extra, b) for _ in range(args.iters + 1)][1:]
            rows.append(("adeadvm", "cpu", b, statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs)))
            print("adeadvm batch %d done" % b, file=sys.stderr)

    print()
    print("SmolLM2-135M-Instruct Q4_1%s, prompt %d tokens, %d generated; %s; %d threads; tokens/s"
          % (" (synthetic weights)" if synthetic else "", args.prompt_len, args.gen, machine, args.threads))
    print("%-10s %-14s %5s %14s %14s" % ("engine", "tool", "batch", "prompt tok/s", "gen tok/s"))
    for engine, tool, b, pp, tg in rows:
        print("%-10s %-14s %5d %14.1f %14.1f" % (engine, tool, b, pp, tg))
    ratios = []
    for a in [r for r in rows if r[0] == "adeadvm"]:
        for p in [r for r in rows if r[0] == "llama.cpp" and r[2] == a[2]]:
            ratios.append({"batch": a[2], "against": p[1], "prompt": a[3] / p[3], "generation": a[4] / p[4]})
    if ratios:
        print("\nratios adeadvm / llama.cpp at the same batch size (tokens/s; above 1: adeadvm faster)")
        for r in ratios:
            print("adeadvm cpu / llama.cpp %-14s (batch %d): prompt %.2fx, generation %.2fx" % (r["against"], r["batch"], r["prompt"], r["generation"]))
    if not args.no_llama_bench:
        print("(llama-bench's generation starts from an empty context; batched-bench's, like adeadvm's, follows the prompt)")
    if args.json_out:
        keys = ("engine", "tool", "batch", "prompt_tokens_per_s", "gen_tokens_per_s")
        out = {"machine": machine, "threads": args.threads, "llamacpp": version, "variant": variant,
               "model": str(model), "synthetic_weights": synthetic, "prompt_len": args.prompt_len, "gen": args.gen,
               "iters": args.iters, "rows": [dict(zip(keys, r)) for r in rows], "ratios": ratios, "details": details}
        Path(args.json_out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
