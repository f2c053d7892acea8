#!/usr/bin/env python3
"""Sentence embeddings with all-MiniLM-L6-v2 on adeadvm: rank sentences by similarity to a query.

    dir=$(scripts/fetch-minilm.sh)                                   # weights + tokenizer
    cargo run --release -- asm programs/minilm_l6.s -D WEIGHTS=$dir/model.safetensors -o minilm.bib
    cargo build --release --lib                                      # the C library the binding loads
    python3 python/examples/minilm.py minilm.bib --query "A man is eating pasta."

Tokenizes with the model's own tokenizer.json (the `tokenizers` package: pip install tokenizers),
runs programs/minilm_l6.s through the Python binding, and prints the cosine similarity of each
sentence to the query, best first. The embeddings are unit length, so cosine = dot product.
"""

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # python/adeadvm from a checkout
import adeadvm  # noqa: E402

SENTENCES = [
    "A man is eating food.",
    "A man is eating a piece of bread.",
    "The girl is carrying a baby.",
    "A man is riding a horse.",
    "A woman is playing violin.",
    "Two men pushed carts through the woods.",
    "A man is riding a white horse on an enclosed ground.",
    "A monkey is playing drums.",
    "A cheetah is running behind its prey.",
]


def default_model_dir():
    cache = os.environ.get("ADEADVM_CACHE") or os.path.join(os.path.expanduser("~"), ".cache", "adeadvm")
    return os.path.join(cache, "minilm")


def tokenizer(model_dir):
    try:
        from tokenizers import Tokenizer
    except ImportError:
        sys.exit("minilm.py: the `tokenizers` package is missing: pip install tokenizers")
    path = os.path.join(model_dir, "tokenizer.json")
    if not os.path.exists(path):
        sys.exit("minilm.py: %s not found; run scripts/fetch-minilm.sh (or pass --model DIR)" % path)
    tok = Tokenizer.from_file(path)
    # The file pads every input to 128 tokens; sentence-transformers instead truncates at its
    # max_seq_length (256) and pads each batch to its longest sentence.
    tok.enable_truncation(max_length=256)
    tok.enable_padding(pad_id=0, pad_token="[PAD]")
    return tok


def embed(vm, tok, sentences):
    """Unit-length embeddings [len(sentences), 384] as float32."""
    enc = tok.encode_batch(sentences)
    ids = np.array([e.ids for e in enc], dtype=np.int32)
    mask = np.array([e.attention_mask for e in enc], dtype=np.int32)
    return vm.run(input_ids=ids, attention_mask=mask)["embedding"]


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("program", help="minilm.bib, assembled from programs/minilm_l6.s with -D WEIGHTS=...")
    p.add_argument("--model", default=default_model_dir(), help="folder with tokenizer.json (default: %(default)s)")
    p.add_argument("--query", default="A man is eating pasta.")
    p.add_argument("--tier", choices=["strict", "fast"], default="strict")
    p.add_argument("--backend", default="auto")
    p.add_argument("sentences", nargs="*", help="sentences to rank (default: a built-in list)")
    args = p.parse_args()

    tok = tokenizer(args.model)
    try:
        vm = adeadvm.load(args.program, backend=args.backend, tier=args.tier)
        start = time.perf_counter()
        sentences = args.sentences or SENTENCES
        vectors = embed(vm, tok, [args.query] + sentences)
        elapsed = time.perf_counter() - start
    except adeadvm.Error as e:
        sys.exit("minilm.py: %s" % e)

    query, corpus = vectors[0], vectors[1:]
    scores = corpus @ query
    print("query: %s" % args.query)
    for i in np.argsort(-scores, kind="stable"):
        print("  %.4f  %s" % (scores[i], sentences[i]))
    print(
        "(%d sentences embedded in %.1f ms, %s tier, program %s)"
        % (len(sentences) + 1, elapsed * 1e3, args.tier, vm.digest[:16])
    )


if __name__ == "__main__":
    main()
