#!/usr/bin/env python3
"""Writes smollm2_prompts.json beside this file: three prompts and their token ids.

    pip install tokenizers gguf
    python3 python/tests/data/make_smollm2_prompts.py MODEL.gguf

The ids come from Hugging Face's `tokenizers` library (the Rust BPE that transformers uses for
SmolLM2), not from adeadvm. The model's tokenizer.json could not be downloaded where this was
written (no network to the Hugging Face hub), so the tokenizer is assembled from what the GGUF
file holds of it (tokenizer.ggml.tokens and tokenizer.ggml.merges, which llama.cpp's converter
copies from that tokenizer.json; pre-type "smollm") with the pre-tokenizer and decoder of
SmolLM2's tokenizer.json: digits split one by one, then GPT-2 byte-level BPE without a prefix
space; the 17 special tokens (type 3 in the file: <|endoftext|>, <|im_start|>, <|im_end|>, ...)
are matched whole. The script checks that every prompt decodes back to its text.
"""

import json
import sys
from pathlib import Path

PROMPTS = [
    {
        "name": "chat_capital",
        "kind": "ChatML question (SmolLM2-Instruct's turn format: a user turn, then the assistant's opened; without the default system turn that the GGUF's chat_template adds)",
        "text": "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    },
    {
        "name": "english_story",
        "kind": "plain English continuation",
        "text": "The quick brown fox jumps over the lazy dog. Once upon a time, in a small village by the sea, there lived",
    },
    {
        "name": "python_squares",
        "kind": "Python code with digits",
        "text": "# Python: the squares of 1 to 10\nsquares = [",
    },
]


def tokenizer(gguf_path):
    from gguf import GGUFReader
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    fields = GGUFReader(gguf_path).fields
    tokens = fields["tokenizer.ggml.tokens"].contents()
    merges = [tuple(m.split(" ")) for m in fields["tokenizer.ggml.merges"].contents()]
    types = fields["tokenizer.ggml.token_type"].contents()
    if fields["tokenizer.ggml.pre"].contents() != "smollm":
        sys.exit("expected the GGUF's tokenizer.ggml.pre to be 'smollm'")
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Digits(individual_digits=True), pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)]
    )
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t, k in zip(tokens, types) if k == 3])
    return tok


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    tok = tokenizer(sys.argv[1])
    out = []
    for p in PROMPTS:
        ids = tok.encode(p["text"]).ids
        if tok.decode(ids, skip_special_tokens=False) != p["text"]:
            sys.exit("%s does not decode back to its text" % p["name"])
        out.append(dict(p, ids=ids))
    doc = {
        "about": (
            "Test prompts for SmolLM2-135M-Instruct (python/tests/test_smollm2.py). The ids were "
            "produced by Hugging Face's tokenizers library, independently of adeadvm, with the "
            "model's vocabulary and merges as stored in the GGUF file and SmolLM2's pre-tokenizer "
            "(see make_smollm2_prompts.py). Only inputs are recorded here: the expected outputs "
            "come from running python/tests/smollm2_reference.py at test time."
        ),
        "prompts": out,
    }
    path = Path(__file__).resolve().parent / "smollm2_prompts.json"
    text = json.dumps(doc, indent=2)
    for p in out:  # each id list on one line
        text = text.replace(json.dumps(p["ids"], indent=2).replace("\n", "\n      "), json.dumps(p["ids"]))
    path.write_text(text + "\n")
    print("wrote", path)


if __name__ == "__main__":
    main()
