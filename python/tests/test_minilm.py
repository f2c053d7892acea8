"""all-MiniLM-L6-v2 from Python: the example's whole path (the model's tokenizer.json through the
`tokenizers` package, programs/minilm_l6.s through the binding) against the published model's
own output, and an independent ONNX graph of the model (benches/peer_minilm.py) run by ONNX
Runtime.

Needs the model (scripts/fetch-minilm.sh; run here when it is not cached), the CLI to assemble
(ADEADVM_BIN, else `cargo run`), and the packages tokenizers, onnx and onnxruntime. Where any is
missing the tests skip with the reason, except under CI (env CI set), where they fail.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

import adeadvm  # noqa: E402


def unavailable(why):
    if os.environ.get("CI"):
        pytest.fail("CI is set, but " + why)
    pytest.skip(why)


def load_module(path, name):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def model_dir():
    run = subprocess.run(["bash", str(REPO / "scripts" / "fetch-minilm.sh")], capture_output=True, text=True)
    if run.returncode != 0:
        unavailable("the model could not be fetched: " + run.stderr.strip())
    return Path(run.stdout.strip())


@pytest.fixture(scope="module")
def bib(model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("minilm") / "minilm.bib"
    cmd = os.environ.get("ADEADVM_BIN")
    cmd = [cmd] if cmd else ["cargo", "run", "-q", "--"]
    args = ["asm", str(REPO / "programs" / "minilm_l6.s"), "-D", "WEIGHTS=%s" % (model_dir / "model.safetensors")]
    subprocess.run(cmd + args + ["-o", str(out)], cwd=REPO, check=True, stdout=subprocess.DEVNULL)
    return out


@pytest.fixture(scope="module")
def example():
    return load_module(REPO / "python" / "examples" / "minilm.py", "minilm_example")


# sentence-transformers' semantic-search example (examples/sentence_transformer/applications/
# semantic-search in UKPLab/sentence-transformers) runs all-MiniLM-L6-v2 in PyTorch over the
# corpus the example script also uses, and its README prints, per query, the top 5 with their
# cosine scores to 4 decimals.
PUBLISHED = {
    "A man is eating pasta.": [
        ("A man is eating food.", 0.7035),
        ("A man is eating a piece of bread.", 0.5272),
        ("A man is riding a horse.", 0.1889),
        ("A man is riding a white horse on an enclosed ground.", 0.1047),
        ("A cheetah is running behind its prey.", 0.0980),
    ],
    "Someone in a gorilla costume is playing a set of drums.": [
        ("A monkey is playing drums.", 0.6433),
        ("A woman is playing violin.", 0.2564),
        ("A man is riding a horse.", 0.1389),
        ("A man is riding a white horse on an enclosed ground.", 0.1191),
        ("A cheetah is running behind its prey.", 0.1080),
    ],
    "A cheetah chases prey on across a field.": [
        ("A cheetah is running behind its prey.", 0.8253),
        ("A man is eating food.", 0.1399),
        ("A monkey is playing drums.", 0.1292),
        ("A man is riding a white horse on an enclosed ground.", 0.1097),
        ("A man is riding a horse.", 0.0650),
    ],
}


@pytest.mark.parametrize("tier", ["strict", "fast"])
def test_example_reproduces_the_published_scores(example, model_dir, bib, tier):
    try:
        tok = example.tokenizer(str(model_dir))
    except SystemExit as e:
        unavailable(str(e))
    vm = adeadvm.load(str(bib), backend="cpu", tier=tier)
    corpus = example.SENTENCES
    queries = list(PUBLISHED)
    vectors = example.embed(vm, tok, corpus + queries).astype(np.float64)
    assert vectors.shape == (len(corpus) + len(queries), 384)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-6)
    for q, query in enumerate(queries):
        scores = vectors[: len(corpus)] @ vectors[len(corpus) + q]
        order = np.argsort(-scores, kind="stable")[:5]
        got = [(corpus[i], scores[i]) for i in order]
        assert [s for s, _ in got] == [s for s, _ in PUBLISHED[query]], query
        for (sentence, score), (_, published) in zip(got, PUBLISHED[query]):
            # 4 printed decimals (5e-5) plus 1e-5 for PyTorch's own float32 rounding
            assert abs(score - published) <= 6e-5, (query, sentence, score, published)


def test_an_independent_onnx_graph_agrees(model_dir, bib):
    try:
        import onnxruntime as ort
    except ImportError:
        unavailable("onnxruntime is not installed (pip install onnx onnxruntime)")
    peer = load_module(REPO / "benches" / "peer_minilm.py", "peer_minilm")
    try:
        model = peer.build_onnx(peer.read_safetensors(str(model_dir / "model.safetensors")))
    except ImportError:
        unavailable("onnx is not installed (pip install onnx onnxruntime)")
    so = ort.SessionOptions()
    so.intra_op_num_threads = 2
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    ids, mask = peer.inputs(3, 24, seed=7)  # random tokens, rows 2 and 3 padded
    want = sess.run(["embedding"], {"input_ids": ids, "attention_mask": mask})[0]
    for tier in ("strict", "fast"):
        got = adeadvm.load(str(bib), backend="cpu", tier=tier).run(input_ids=ids, attention_mask=mask)["embedding"]
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-4, tier


def test_the_onnx_graph_imported_gives_the_hand_written_programs_embeddings(model_dir, bib, tmp_path):
    """`adeadvm import` of the same ONNX graph: its embeddings against programs/minilm_l6.s's,
    within 1e-5 (the importer fuses MatMul + bias + GELU and the scaled, masked softmax as the
    hand-written program does, so they are in fact the same bits)."""
    peer = load_module(REPO / "benches" / "peer_minilm.py", "peer_minilm")
    try:
        import onnx
    except ImportError:
        unavailable("onnx is not installed (pip install onnx onnxruntime)")
    model = peer.build_onnx(peer.read_safetensors(str(model_dir / "model.safetensors")))
    onnx_path = tmp_path / "minilm.onnx"
    onnx.save(model, str(onnx_path))
    imported = tmp_path / "minilm_imported.bib"
    cmd = os.environ.get("ADEADVM_BIN")
    cmd = [cmd] if cmd else ["cargo", "run", "-q", "--"]
    subprocess.run(cmd + ["import", str(onnx_path), "-o", str(imported)], cwd=REPO, check=True)
    ids, mask = peer.inputs(3, 24, seed=11)  # rows 2 and 3 padded
    for tier in ("strict", "fast"):
        want = adeadvm.load(str(bib), backend="cpu", tier=tier).run(input_ids=ids, attention_mask=mask)["embedding"]
        got = adeadvm.load(str(imported), backend="cpu", tier=tier).run(input_ids=ids, attention_mask=mask)["embedding"]
        assert got.shape == want.shape
        assert np.abs(got - want).max() <= 1e-5, tier
