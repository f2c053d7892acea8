"""SmolLM2-135M-Instruct (GGUF, Q4_1) generated greedily by programs/smollm2.s, against an
independent float64 reference of the model (python/tests/smollm2_reference.py, written from
Hugging Face's LlamaForCausalLM, not from adeadvm) run here at test time.

    ADEADVM_BIN=target/release/adeadvm pytest python/tests/test_smollm2.py      # or: -m smollm2

For each prompt of python/tests/data/smollm2_prompts.json (ids from the Hugging Face tokenizers
library; see make_smollm2_prompts.py there):
  * `adeadvm generate --backend cpu` gives the reference's 32 greedy tokens, and its logits
    (--logits-out, every step it keeps, at least the first) are within 1e-4 of the reference's
    by the metric of `relative_error` below;
  * the program as it is (the GGUF's Q4_1/Q8_0 blocks kept) and the program assembled with
    `-D PROJ=f32 -D EMBED=f32` (the same weights dequantized into f32 constants) give the same
    tokens and the same logits bits on the CPU;
  * `--backend vulkan` gives the same tokens and the same logits bits as the CPU. Without a
    Vulkan device this part skips, unless ADEADVM_REQUIRE_VULKAN=1 (CI), where it fails.

The model: env ADEADVM_SMOLLM2_GGUF (the .gguf file), else scripts/fetch-smollm2.sh (downloads
it into a cache folder, prints the folder as its last stdout line). Nothing here skips for a
missing model or program: set ADEADVM_SKIP_SMOLLM2=1 to skip the whole file. The CLI is
ADEADVM_BIN, else `cargo run --release` (a debug build is very slow on a 135M-parameter model).
"""

import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PROGRAM = REPO / "programs" / "smollm2.s"
FETCH = REPO / "scripts" / "fetch-smollm2.sh"
PROMPTS = json.loads((HERE / "data" / "smollm2_prompts.json").read_text())["prompts"]
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"

STEPS = 32
# max_v |adeadvm(v) - reference(v)| / max_v |reference(v)| over the vocabulary, for each kept
# step. Logits are O(10) with many near zero, so an elementwise relative error would blow up on
# the small ones; scaling by the largest magnitude measures the error at the scale that decides
# the argmax. float32 arithmetic over 30 blocks stays well inside 1e-4 of this.
LOGITS_TOL = 1e-4
# Seconds for one CLI call (assembling, or 32 steps of generation); generous, only a backstop.
CLI_TIMEOUT_S = 1800

pytestmark = [
    pytest.mark.smollm2,
    pytest.mark.skipif(
        os.environ.get("ADEADVM_SKIP_SMOLLM2") == "1", reason="ADEADVM_SKIP_SMOLLM2=1 is set"
    ),
]


def relative_error(got, want):
    """max |got - want| / max |want| over the last axis (the vocabulary)."""
    want = np.asarray(want, dtype=np.float64)
    scale = np.abs(want).max()
    assert scale > 0, "the reference's logits are all zero"
    return float(np.abs(np.asarray(got, dtype=np.float64) - want).max() / scale)


def load_reference_module():
    spec = importlib.util.spec_from_file_location("smollm2_reference", HERE / "smollm2_reference.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def adeadvm_cmd():
    exe = os.environ.get("ADEADVM_BIN")
    return [exe] if exe else ["cargo", "run", "-q", "--release", "--"]


def run_cli(args, what):
    cmd = adeadvm_cmd() + [str(a) for a in args]
    run = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=CLI_TIMEOUT_S)
    if run.returncode != 0:
        pytest.fail(
            "%s failed (exit %d): %s\n--- stderr ---\n%s\n--- stdout ---\n%s"
            % (what, run.returncode, " ".join(cmd), run.stderr.strip()[-4000:], run.stdout.strip()[-2000:])
        )
    return run.stdout


@pytest.fixture(scope="module")
def gguf_path():
    env = os.environ.get("ADEADVM_SMOLLM2_GGUF")
    if env:
        path = Path(env)
        assert path.is_file(), "ADEADVM_SMOLLM2_GGUF=%s is not a file" % env
        return path
    assert FETCH.is_file(), "%s is missing (or set ADEADVM_SMOLLM2_GGUF to the model's .gguf)" % FETCH
    run = subprocess.run(["bash", str(FETCH)], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, "scripts/fetch-smollm2.sh failed (exit %d):\n%s" % (
        run.returncode,
        run.stderr.strip()[-4000:],
    )
    lines = [line for line in run.stdout.splitlines() if line.strip()]
    assert lines, "scripts/fetch-smollm2.sh printed no folder on stdout"
    folder = Path(lines[-1].strip())
    assert folder.is_dir(), "scripts/fetch-smollm2.sh printed %r, which is not a folder" % lines[-1]
    if (folder / GGUF_NAME).is_file():
        return folder / GGUF_NAME
    found = sorted(folder.glob("*.gguf"))
    assert len(found) == 1, "expected %s (or a single .gguf) in %s, found %s" % (GGUF_NAME, folder, found)
    return found[0]


def assemble(gguf_path, folder, name, defines):
    assert PROGRAM.is_file(), "%s does not exist" % PROGRAM
    out = folder / name
    args = ["asm", PROGRAM, "-D", "WEIGHTS=%s" % gguf_path, "-o", out]
    for d in defines:
        args += ["-D", d]
    run_cli(args, "assembling programs/smollm2.s %s" % " ".join(defines))
    assert out.is_file(), "adeadvm asm exited 0 but wrote no %s" % out
    return out


@pytest.fixture(scope="module")
def bib(gguf_path, tmp_path_factory):
    """programs/smollm2.s as it is: the GGUF's blocks kept, so about the GGUF's size."""
    out = assemble(gguf_path, tmp_path_factory.mktemp("smollm2"), "smollm2.bib", [])
    size, gguf_size = out.stat().st_size, gguf_path.stat().st_size
    assert abs(size - gguf_size) <= 0.1 * gguf_size, "the .bib is %d bytes, the GGUF %d" % (size, gguf_size)
    return out


@pytest.fixture(scope="module")
def bib_f32(gguf_path, tmp_path_factory):
    """The same weights dequantized into f32 constants at assembly time."""
    return assemble(gguf_path, tmp_path_factory.mktemp("smollm2_f32"), "smollm2_f32.bib", ["PROJ=f32", "EMBED=f32"])


@pytest.fixture(scope="module")
def reference(gguf_path):
    """name -> (tokens, float64 logits [STEPS, vocab]) of the float64 reference, computed once."""
    ref = load_reference_module()
    model = ref.load(str(gguf_path))
    cache = {}

    def get(prompt):
        if prompt["name"] not in cache:
            tokens, logits = model.generate(prompt["ids"], STEPS)
            cache[prompt["name"]] = (tokens, np.stack(logits))
        return cache[prompt["name"]]

    return get


@pytest.fixture(scope="module")
def generated(bib, bib_f32, tmp_path_factory):
    """(prompt name, backend, program) -> (ids, float32 logits [kept, vocab]) from `adeadvm
    generate`; program "q" is `bib` (blocks kept), "f32" is `bib_f32`."""
    cache = {}
    folder = tmp_path_factory.mktemp("smollm2_runs")
    programs = {"q": bib, "f32": bib_f32}

    def get(prompt, backend, program="q"):
        key = (prompt["name"], backend, program)
        if key not in cache:
            logits_path = folder / ("%s_%s_%s.npy" % key)
            args = ["generate", programs[program], "--prompt-ids", ",".join(str(i) for i in prompt["ids"])]
            args += ["--max-tokens", STEPS, "--ignore-eos", "--json", "--backend", backend]
            args += ["--logits-out", logits_path]
            stdout = run_cli(args, "adeadvm generate (%s, %s, %s)" % key)
            out = parse_json(stdout)
            assert "ids" in out, "adeadvm generate --json printed no 'ids': %s" % stdout[-2000:]
            ids = [int(i) for i in out["ids"]]
            assert len(ids) == STEPS, "asked for %d tokens with --ignore-eos, got %d: %s" % (STEPS, len(ids), ids)
            assert logits_path.is_file(), "--logits-out %s was not written" % logits_path
            logits = np.load(logits_path)
            assert logits.dtype == np.float32, "--logits-out should be float32, is %s" % logits.dtype
            assert logits.ndim == 2 and 1 <= logits.shape[0] <= STEPS, "--logits-out has shape %s" % (logits.shape,)
            cache[key] = (ids, logits)
        return cache[key]

    return get


def parse_json(stdout):
    """The JSON object printed by --json (the whole stdout, else its last line that parses)."""
    try:
        return json.loads(stdout)
    except json.JSONDecodeError:
        pass
    for line in reversed(stdout.strip().splitlines()):
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    pytest.fail("adeadvm generate --json printed no JSON object:\n%s" % stdout[-2000:])


def vulkan_available():
    """Whether `adeadvm info` lists a Vulkan device; (bool, its vulkan line)."""
    info = run_cli(["info"], "adeadvm info")
    line = next((l.strip() for l in info.splitlines() if l.strip().startswith("vulkan")), "no vulkan line")
    m = re.match(r"vulkan\s+(\d+) device", line)
    return bool(m and int(m.group(1)) > 0), line


def describe_divergence(got, want, logits):
    """Where two token lists first differ, with the reference's top-2 margin there."""
    i = next((k for k, (a, b) in enumerate(zip(got, want)) if a != b), None)
    if i is None:
        return "lengths differ: %d vs %d" % (len(got), len(want))
    top = np.sort(logits[i])[-2:]
    return "first difference at step %d: adeadvm %d, reference %d (reference top-2 margin %.5f)\n  adeadvm   %s\n  reference %s" % (
        i,
        got[i],
        want[i],
        top[1] - top[0],
        got,
        want,
    )


@pytest.mark.parametrize("prompt", PROMPTS, ids=[p["name"] for p in PROMPTS])
def test_cpu_matches_the_float64_reference(prompt, reference, generated):
    want_ids, want_logits = reference(prompt)
    ids, logits = generated(prompt, "cpu")
    assert logits.shape[1] == want_logits.shape[1], "vocabulary %d, reference %d" % (
        logits.shape[1],
        want_logits.shape[1],
    )
    assert ids == want_ids, "greedy tokens differ from the reference's; " + describe_divergence(
        ids, want_ids, want_logits
    )
    # The kept steps saw the same tokens (checked above), so each is comparable; the first one
    # is always kept.
    errors = [relative_error(logits[s], want_logits[s]) for s in range(logits.shape[0])]
    assert np.argmax(logits[0]) == want_ids[0]
    assert max(errors) <= LOGITS_TOL, "logits' relative error per kept step (tolerance %g): %s" % (
        LOGITS_TOL,
        ["%.2e" % e for e in errors],
    )


@pytest.mark.parametrize("prompt", PROMPTS, ids=[p["name"] for p in PROMPTS])
def test_vulkan_matches_cpu_bit_for_bit(prompt, generated):
    ok, line = vulkan_available()
    if not ok:
        if os.environ.get("ADEADVM_REQUIRE_VULKAN") == "1":
            pytest.fail("ADEADVM_REQUIRE_VULKAN=1 but adeadvm info finds no Vulkan device: " + line)
        pytest.skip("no Vulkan device (adeadvm info: %s)" % line)
    cpu_ids, cpu_logits = generated(prompt, "cpu")
    vk_ids, vk_logits = generated(prompt, "vulkan")
    assert_same_bits(vk_ids, vk_logits, cpu_ids, cpu_logits, "vulkan", "cpu")


@pytest.mark.parametrize("prompt", PROMPTS, ids=[p["name"] for p in PROMPTS])
def test_quantized_and_dequantized_programs_give_the_same_bits(prompt, generated):
    """The blocks stand for exactly the f32 values `-D PROJ=f32 -D EMBED=f32` stores, and MATMUL
    and GATHER read them as those values: the same tokens and logits, bit for bit."""
    q_ids, q_logits = generated(prompt, "cpu", "q")
    f_ids, f_logits = generated(prompt, "cpu", "f32")
    assert_same_bits(q_ids, q_logits, f_ids, f_logits, "quantized", "dequantized")


def assert_same_bits(ids, logits, want_ids, want_logits, what, other):
    assert ids == want_ids, "%s's tokens differ from %s's:\n  %s\n  %s" % (what, other, ids, want_ids)
    assert logits.shape == want_logits.shape
    differ = np.flatnonzero(logits.view(np.uint32).ravel() != want_logits.view(np.uint32).ravel())
    assert differ.size == 0, "%d logits of %s differ in bits from %s's, first at flat index %d (%r vs %r)" % (
        differ.size,
        what,
        other,
        differ[0],
        logits.ravel()[differ[0]],
        want_logits.ravel()[differ[0]],
    )


def test_the_reference_rotates_as_hugging_face_does(gguf_path):
    """The reference's un-permuting of attn_q/attn_k (back to Hugging Face's layout, RoPE by
    rotate_half) agrees with RoPE on adjacent pairs over the file's own row order, the
    convention llama.cpp's converter permuted them for: a check of the reference itself."""
    ref = load_reference_module()
    diff = ref.selfcheck(str(gguf_path), PROMPTS[0]["ids"], steps=2)
    assert diff < 1e-9, "the two RoPE layouts' logits differ by %g" % diff
