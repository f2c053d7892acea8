"""python/examples/ray_minilm.py: MiniLM embeddings fanned over a local Ray cluster (two actors,
one adeadvm session each) equal one local run of the whole batch, bit for bit, as the example's
README lines run it; and the property it rests on, checked here without Ray: in the strict tier a
row's embedding does not depend on the rest of its batch.

Needs the model (scripts/fetch-minilm.sh), the CLI to assemble (ADEADVM_BIN, else `cargo run`),
and the packages ray and tokenizers; where any is missing the tests skip with the reason, except
under CI (env CI set), where they fail.
"""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import adeadvm  # noqa: E402
from test_minilm import bib, load_module, model_dir, unavailable  # noqa: E402,F401  (fixtures)

EXAMPLE = REPO / "python" / "examples" / "ray_minilm.py"


@pytest.fixture(scope="module")
def example():
    try:
        import tokenizers  # noqa: F401
    except ImportError:
        unavailable("the tokenizers package is missing")
    return load_module(EXAMPLE, "ray_minilm_example")


def test_rows_do_not_depend_on_their_batch(example, bib, model_dir):
    tok = example.tokenizer(str(model_dir))
    enc = tok.encode_batch(example.corpus(20))
    ids = np.array([e.ids for e in enc], dtype=np.int32)
    mask = np.array([e.attention_mask for e in enc], dtype=np.int32)
    vm = adeadvm.load(str(bib), backend="cpu", tier="strict", threads=2)
    whole = vm.run(input_ids=ids, attention_mask=mask)["embedding"]
    assert whole.shape == (20, 384)
    for chunk in (1, 3, 7):
        parts = [vm.run(input_ids=ids[i : i + chunk], attention_mask=mask[i : i + chunk])["embedding"] for i in range(0, 20, chunk)]
        joined = np.concatenate(parts)
        assert np.array_equal(joined.view(np.uint32), whole.view(np.uint32)), "chunks of %d differ" % chunk


def test_example_over_a_local_ray_cluster(example, bib, model_dir):
    try:
        import ray  # noqa: F401
    except ImportError:
        unavailable("the ray package is missing")
    args = [str(bib), "--model", str(model_dir), "--actors", "2", "--batch", "24", "--chunk", "5", "--backend", "cpu"]
    run = subprocess.run([sys.executable, str(EXAMPLE)] + args, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "24 sentences in 5 chunks of 5 rows" in run.stdout
    assert "the joined embeddings are the local run's, bit for bit (strict tier)" in run.stdout


def test_example_refuses_a_missing_program(example, tmp_path):
    run = subprocess.run([sys.executable, str(EXAMPLE), str(tmp_path / "nothing.bib")], capture_output=True, text=True)
    assert run.returncode == 1
    assert "ray_minilm.py: cannot read" in run.stderr and "nothing.bib" in run.stderr
