"""The Python binding's `VM.generate` on programs/smollm2.s with a tiny random Llama model
written here as a GGUF file: the same ids as `adeadvm generate` (the CLI), the same ids and
logits bits for a prompt alone and in a batch, and the CLI's errors as exceptions.
Needs the C library and the CLI (`cargo build --lib --bin adeadvm`), or ADEADVM_LIB/ADEADVM_BIN."""

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

import adeadvm  # noqa: E402

SIZES = dict(L=2, D=32, H=4, KVH=2, GROUP=2, HD=8, HALF=4, KVD=16, FF=48, VOCAB=61, THETA=10000,
             SCALE=0.35355339059327373, CTX=40, MAXNEW=12, KEEP=3, MAXB=8)


def write_gguf(path, tensors):
    """A GGUF v3 file of float32 tensors (dims listed fastest first, data 32-byte aligned)."""
    def s(text):
        b = text.encode()
        return struct.pack("<Q", len(b)) + b

    # A byte-level vocabulary of 61 tokens: three control tokens, then space (GPT-2's U+0120),
    # a-z, A-Z and 0-4, and no merges.
    tokens = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "\u0120"]
    tokens += [chr(c) for c in range(ord("a"), ord("z") + 1)] + [chr(c) for c in range(ord("A"), ord("Z") + 1)]
    tokens += [chr(c) for c in range(ord("0"), ord("4") + 1)]
    assert len(tokens) == SIZES["VOCAB"]
    kv = [("general.architecture", struct.pack("<I", 8) + s("llama")),
          ("tokenizer.ggml.model", struct.pack("<I", 8) + s("gpt2")),
          ("tokenizer.ggml.tokens", struct.pack("<IIQ", 9, 8, len(tokens)) + b"".join(s(t) for t in tokens)),
          ("tokenizer.ggml.token_type", struct.pack("<IIQ", 9, 5, len(tokens))
           + b"".join(struct.pack("<i", 3 if i < 3 else 1) for i in range(len(tokens)))),
          ("tokenizer.ggml.merges", struct.pack("<IIQ", 9, 8, 0)),
          ("tokenizer.ggml.eos_token_id", struct.pack("<II", 4, 2))]
    out = b"GGUF" + struct.pack("<IQQ", 3, len(tensors), len(kv))
    for key, value in kv:
        out += s(key) + value
    offset = 0
    for name, a in tensors:
        out += s(name) + struct.pack("<I", a.ndim)
        out += b"".join(struct.pack("<Q", d) for d in reversed(a.shape))
        out += struct.pack("<IQ", 0, offset)
        offset += -(-a.nbytes // 32) * 32
    out += b"\0" * (-len(out) % 32)
    for _, a in tensors:
        out += a.astype("<f4").tobytes()
        out += b"\0" * (-len(out) % 32)
    path.write_bytes(out)


def cli():
    exe = os.environ.get("ADEADVM_BIN")
    return [exe] if exe else ["cargo", "run", "-q", "--"]


@pytest.fixture(scope="module")
def tiny_bib(tmp_path_factory):
    d = tmp_path_factory.mktemp("tiny_llama")
    rng = np.random.default_rng(7)
    z = SIZES
    m = lambda *shape: rng.uniform(-0.3, 0.3, shape).astype(np.float32)  # noqa: E731
    norm = lambda: (1 + rng.uniform(-0.2, 0.2, z["D"])).astype(np.float32)  # noqa: E731
    tensors = [("token_embd.weight", m(z["VOCAB"], z["D"]) * 3), ("output_norm.weight", norm())]
    for l in range(z["L"]):
        tensors += [
            ("blk.%d.attn_norm.weight" % l, norm()),
            ("blk.%d.attn_q.weight" % l, m(z["D"], z["D"])),
            ("blk.%d.attn_k.weight" % l, m(z["KVD"], z["D"])),
            ("blk.%d.attn_v.weight" % l, m(z["KVD"], z["D"])),
            ("blk.%d.attn_output.weight" % l, m(z["D"], z["D"])),
            ("blk.%d.ffn_norm.weight" % l, norm()),
            ("blk.%d.ffn_gate.weight" % l, m(z["FF"], z["D"])),
            ("blk.%d.ffn_up.weight" % l, m(z["FF"], z["D"])),
            ("blk.%d.ffn_down.weight" % l, m(z["D"], z["FF"])),
        ]
    gguf = d / "tiny.gguf"
    write_gguf(gguf, tensors)
    bib = d / "tiny.bib"
    # The file's tensors are f32: the program's weights are declared f32 to match (by default
    # it keeps a GGUF's Q4_1/Q8_0 blocks, which the assembler checks against the file's types).
    args = ["asm", str(REPO / "programs" / "smollm2.s"), "-o", str(bib), "-D", "WEIGHTS=%s" % gguf]
    args += ["-D", "PROJ=f32", "-D", "EMBED=f32"]
    for k, v in z.items():
        args += ["-D", "%s=%s" % (k, v)]
    subprocess.run(cli() + args, cwd=REPO, check=True)
    return bib


PROMPTS = [[3, 17, 42, 5, 9, 60, 1], [12], [7, 7, 7, 30]]


def test_generate_matches_the_cli_and_is_batch_invariant(tiny_bib):
    vm = adeadvm.load(str(tiny_bib), backend="cpu")
    batch = vm.generate(PROMPTS, 10)
    assert len(batch) == 3
    for prompt, got in zip(PROMPTS, batch):
        assert len(got["ids"]) == 10 and not got["stopped"]
        assert got["logits"].shape == (3, SIZES["VOCAB"]) and got["logits"].dtype == np.float32
        alone = vm.generate([prompt], 10)[0]
        assert alone["ids"] == got["ids"]
        assert alone["logits"].tobytes() == got["logits"].tobytes()
        ids = ",".join(str(t) for t in prompt)
        run = subprocess.run(
            cli() + ["generate", str(tiny_bib), "--prompt-ids", ids, "--max-tokens", "10", "--ignore-eos",
                     "--json", "--backend", "cpu"],
            cwd=REPO, check=True, capture_output=True, text=True,
        )
        assert json.loads(run.stdout)["ids"] == got["ids"]


def test_a_stop_token_ends_a_sequence_and_is_left_out(tiny_bib):
    vm = adeadvm.load(str(tiny_bib), backend="cpu")
    free = vm.generate([PROMPTS[0]], 10)[0]["ids"]
    stop = free[3]
    first = free.index(stop)
    got = vm.generate([PROMPTS[0]], 10, stop=stop)[0]
    assert got["stopped"] and got["ids"] == free[:first]


def test_generate_errors_are_the_vm_messages(tiny_bib):
    vm = adeadvm.load(str(tiny_bib), backend="cpu")
    with pytest.raises(adeadvm.Error) as e:
        vm.generate([[1, 2]], 13)
    assert "13 new tokens asked for, outside 1..=12" in str(e.value)
    with pytest.raises(adeadvm.Error) as e:
        vm.generate([[1, 99]], 2)
    assert "token 99 at position 1 of prompt 0 is outside the vocabulary of 61 tokens" in str(e.value)
    mlp = adeadvm.load(str(REPO / "programs" / "mlp.s"))
    with pytest.raises(adeadvm.Error) as e:
        mlp.generate([[1]], 2)
    assert "is not a generation program" in str(e.value)


def test_text_prompts_go_through_the_vocabulary_the_program_carries(tiny_bib):
    vm = adeadvm.load(str(tiny_bib), backend="cpu")
    # h, i, space, B, o in the tiny vocabulary (the order written above).
    assert vm.tokenize("hi Bo") == [11, 12, 3, 31, 18]
    assert vm.detokenize([11, 12, 3, 31, 18]) == "hi Bo"
    assert vm.eos_id == 2
    by_text = vm.generate(["hi Bo"], 6, chat=False)[0]
    by_ids = vm.generate([[11, 12, 3, 31, 18]], 6)[0]
    assert by_text["ids"] == by_ids["ids"]
    assert by_text["text"] == vm.detokenize(by_ids["ids"])
    with pytest.raises(adeadvm.Error) as e:
        vm.detokenize([61])
    assert "token id 61 is outside the vocabulary of 61 tokens" in str(e.value)
