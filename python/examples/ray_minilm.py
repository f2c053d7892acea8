#!/usr/bin/env python3
"""Sentence embeddings fanned over a pool of Ray actors, each holding one adeadvm session, and
checked bit for bit against one local run of the whole batch.

    dir=$(scripts/fetch-minilm.sh)
    cargo run --release -- asm programs/minilm_l6.s -D WEIGHTS=$dir/model.safetensors -o minilm.bib
    cargo build --release --lib                  # the C library the binding loads
    pip install ray tokenizers numpy
    python3 python/examples/ray_minilm.py minilm.bib --actors 2 --batch 64

Without `--address` Ray starts a cluster on this machine; with `--address auto` (after `ray start
--head` here and `ray start --address HEAD:6379` on the others) the actors spread over every
machine of the cluster. The program's bytes travel through Ray's object store, so the machines
need the binding (this checkout's python/ and its C library) but not the .bib file.

The batch is tokenized once and padded to one length, cut into chunks of `--chunk` rows, and
the chunks go to the actors as they free up (ray.util.ActorPool); the joined rows are the
embeddings of the whole batch. In the strict tier (the program's, and the default here) a row's
embedding is the same bits whatever else is in its batch and wherever it runs (every executor,
thread count and machine gives the strict bits), so the joined result must equal one local run's
bit for bit: the script checks that and exits 1 if not.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))  # python/adeadvm from a checkout
sys.path.insert(0, str(HERE))
import adeadvm  # noqa: E402
from minilm import SENTENCES, default_model_dir, tokenizer  # noqa: E402


class Embedder:
    """One adeadvm session on one Ray worker (wrapped with ray.remote in main)."""

    def __init__(self, program_bytes, backend, tier, threads, python_dir):
        sys.path.insert(0, python_dir)
        import adeadvm

        # The session loads from a file: the bytes go to one in this worker's temporary folder.
        fd, path = tempfile.mkstemp(suffix=".bib")
        with os.fdopen(fd, "wb") as f:
            f.write(program_bytes)
        self.vm = adeadvm.load(path, backend=backend, tier=tier, threads=threads)
        os.unlink(path)

    def embed(self, ids, mask):
        return self.vm.run(input_ids=ids, attention_mask=mask)["embedding"]

    def where(self):
        import socket

        return "%s (pid %d)" % (socket.gethostname(), os.getpid())


def corpus(n):
    """n distinct sentences: the example corpus, then combinations of its clauses."""
    out = list(SENTENCES)
    i = 0
    while len(out) < n:
        a, b = SENTENCES[i % len(SENTENCES)], SENTENCES[(i * 7 + 3) % len(SENTENCES)]
        out.append("%s And %s (%d)" % (a[:-1], b[0].lower() + b[1:], i))
        i += 1
    return out[:n]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("program", help="minilm.bib, assembled from programs/minilm_l6.s with -D WEIGHTS=...")
    p.add_argument("--model", default=default_model_dir(), help="folder with tokenizer.json (default: %(default)s)")
    p.add_argument("--actors", type=int, default=2, help="Ray actors, one adeadvm session each (default 2)")
    p.add_argument("--batch", type=int, default=64, help="sentences in the batch (default 64)")
    p.add_argument("--chunk", type=int, default=8, help="rows an actor embeds per call (default 8)")
    p.add_argument("--backend", default="auto", choices=["auto", "cpu", "vulkan"], help="each actor's executor")
    p.add_argument("--threads", type=int, default=1, help="worker threads per actor (default 1)")
    p.add_argument("--tier", default="strict", choices=["strict", "fast"])
    p.add_argument("--address", help="a running Ray cluster (e.g. auto); default: start one here")
    args = p.parse_args()
    for name in ("actors", "batch", "chunk", "threads"):
        if getattr(args, name) < 1:
            p.error("--%s must be at least 1" % name)
    try:
        program_bytes = Path(args.program).read_bytes()
    except OSError as e:
        sys.exit("ray_minilm.py: cannot read %s: %s" % (args.program, e.strerror))
    try:
        import ray
        from ray.util import ActorPool
    except ImportError:
        sys.exit("ray_minilm.py: the `ray` package is missing: pip install ray")

    tok = tokenizer(args.model)
    enc = tok.encode_batch(corpus(args.batch))
    ids = np.array([e.ids for e in enc], dtype=np.int32)
    mask = np.array([e.attention_mask for e in enc], dtype=np.int32)

    t = time.perf_counter()
    local = adeadvm.load(args.program, backend=args.backend, tier=args.tier).run(input_ids=ids, attention_mask=mask)
    local = local["embedding"]
    local_s = time.perf_counter() - t

    if args.address:
        ray.init(address=args.address, logging_level="ERROR")
    else:
        ray.init(num_cpus=args.actors * args.threads, include_dashboard=False, logging_level="ERROR")
    remote = ray.remote(num_cpus=args.threads)(Embedder)
    blob = ray.put(program_bytes)
    python_dir = str(HERE.parent)
    actors = [remote.remote(blob, args.backend, args.tier, args.threads, python_dir) for _ in range(args.actors)]
    places = ray.get([a.where.remote() for a in actors])
    chunks = [(ids[i : i + args.chunk], mask[i : i + args.chunk]) for i in range(0, args.batch, args.chunk)]
    t = time.perf_counter()
    rows = ActorPool(actors).map(lambda a, c: a.embed.remote(*c), chunks)
    joined = np.concatenate(list(rows))
    ray_s = time.perf_counter() - t
    ray.shutdown()

    print("actors: %s" % ", ".join(places))
    print("%d sentences in %d chunks of %d rows: local %.3f s, over %d actors %.3f s"
          % (args.batch, len(chunks), args.chunk, local_s, args.actors, ray_s))
    same = joined.shape == local.shape and np.array_equal(joined.view(np.uint32), local.view(np.uint32))
    if not same:
        diff = float(np.max(np.abs(joined - local))) if joined.shape == local.shape else float("nan")
        print("the joined embeddings differ from the local run's (largest difference %.3g)" % diff)
        sys.exit(1)
    print("the joined embeddings are the local run's, bit for bit (%s tier)" % args.tier)


if __name__ == "__main__":
    main()
