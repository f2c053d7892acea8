"""Tests of the Python binding: bit-identical to the CLI, errors carry the VM's message,
sessions on threads agree. Needs the C library built (`cargo build --lib`) and the CLI binary
(`cargo build`), or ADEADVM_LIB / ADEADVM_BIN pointing at them."""

import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

import adeadvm  # noqa: E402

MLP = REPO / "programs" / "mlp.s"
X = REPO / "programs" / "data" / "mlp_x.npy"


def cli_output(tmp_path, program, inputs, output):
    """Runs `adeadvm run` and returns the named output as read back from .npy."""
    out = tmp_path / (output + ".npy")
    cmd = os.environ.get("ADEADVM_BIN")
    cmd = [cmd] if cmd else ["cargo", "run", "-q", "--"]
    args = ["run", str(program)]
    for name, path in inputs.items():
        args += ["--input", "%s=%s" % (name, path)]
    args += ["--output", "%s=%s" % (output, out)]
    subprocess.run(cmd + args, cwd=REPO, check=True)
    return np.load(out)


def test_mlp_matches_cli_bit_for_bit(tmp_path):
    vm = adeadvm.load(str(MLP), backend="auto", tier="strict")
    x = np.load(X)
    outs = vm.run(x=x)
    assert list(outs) == ["y"]
    y = outs["y"]
    assert y.dtype == np.float32 and y.shape == (x.shape[0], 10)
    want = cli_output(tmp_path, MLP, {"x": X}, "y")
    assert want.dtype == y.dtype and want.shape == y.shape
    assert want.tobytes() == y.tobytes()
    assert len(vm.digest) == 64 and int(vm.digest, 16) >= 0
    # A second run with the same session gives the same bits.
    assert vm.run(x=x)["y"].tobytes() == y.tobytes()


def test_bib_loads_like_s(tmp_path):
    bib = tmp_path / "mlp.bib"
    cmd = os.environ.get("ADEADVM_BIN")
    cmd = [cmd] if cmd else ["cargo", "run", "-q", "--"]
    subprocess.run(cmd + ["asm", str(MLP), "-o", str(bib)], cwd=REPO, check=True)
    a = adeadvm.load(str(MLP))
    b = adeadvm.load(str(bib), backend="cpu")
    assert a.digest == b.digest
    x = np.load(X)
    assert a.run(x=x)["y"].tobytes() == b.run(x=x)["y"].tobytes()


def test_missing_input_raises():
    vm = adeadvm.load(str(MLP))
    with pytest.raises(adeadvm.Error) as e:
        vm.run()
    assert "x" in str(e.value)
    assert e.value.status not in (None, 0)


def test_unknown_input_raises():
    vm = adeadvm.load(str(MLP))
    with pytest.raises(adeadvm.Error, match="nope"):
        vm.run(nope=np.zeros((1, 784), np.float32))


def test_wrong_dtype_raises():
    vm = adeadvm.load(str(MLP))
    with pytest.raises(adeadvm.Error) as e:
        vm.run(x=np.zeros((1, 784), np.int32))
    assert str(e.value) == "input x is declared f32 but was given i32 data"


def test_unsupported_numpy_dtype_raises():
    vm = adeadvm.load(str(MLP))
    with pytest.raises(adeadvm.Error, match="float64"):
        vm.run(x=np.zeros((1, 784), np.float64))


def test_bad_file_raises(tmp_path):
    with pytest.raises(adeadvm.Error, match="cannot read"):
        adeadvm.load(str(tmp_path / "missing.bib"))
    junk = tmp_path / "junk.bib"
    junk.write_bytes(b"this is not a program at all, not even close" * 4)
    with pytest.raises(adeadvm.Error, match="not an adeadvm program"):
        adeadvm.load(str(junk))


def test_assembly_error_raises(tmp_path):
    bad = tmp_path / "bad.s"
    bad.write_text(".input %x f32[2]\n    FROB %x\n")
    with pytest.raises(adeadvm.Error) as e:
        adeadvm.load(str(bad))
    assert "bad.s:2" in str(e.value)


def test_bad_backend_and_tier():
    with pytest.raises(adeadvm.Error, match="unknown backend `warp`"):
        adeadvm.load(str(MLP), backend="warp")
    with pytest.raises(adeadvm.Error, match="unknown tier"):
        adeadvm.load(str(MLP), tier="loose")


def test_device_memory_budget_is_enforced_on_vulkan():
    """max_device_memory reaches the C config: a Vulkan run needing more is refused."""
    x = np.load(X)
    try:
        unbounded = adeadvm.load(str(MLP), backend="vulkan")
    except adeadvm.Error as e:
        if os.environ.get("ADEADVM_REQUIRE_VULKAN") == "1":
            raise
        pytest.skip("no Vulkan device: %s" % e)
    assert unbounded.run(x=x)["y"].shape == (x.shape[0], 10)
    vm = adeadvm.load(str(MLP), backend="vulkan", max_device_memory=65536)
    with pytest.raises(adeadvm.Error) as e:
        vm.run(x=x)
    assert str(e.value).startswith("this run needs ")
    assert str(e.value).endswith("more than the device memory budget of 65536 bytes")
    assert e.value.status == 10  # ADEADVM_STATUS_BUDGET
    with pytest.raises(adeadvm.Error, match="budget of 65536 bytes"):
        vm.clone().run(x=x)


def test_devices_split_the_batch_with_the_single_run_bits():
    """devices= reaches the C config: the batch is split over the listed executors, the joined
    output is one run's bits (the CPU and, where there is one, Vulkan device 0)."""
    x = np.repeat(np.load(X), 3, axis=0)  # 12 rows
    want = adeadvm.load(str(MLP), backend="cpu").run(x=x)["y"]
    got = adeadvm.load(str(MLP), devices="cpu,cpu,cpu").run(x=x)["y"]
    assert got.tobytes() == want.tobytes()
    try:
        adeadvm.load(str(MLP), backend="vulkan")
        has_vulkan = True
    except adeadvm.Error as e:
        if os.environ.get("ADEADVM_REQUIRE_VULKAN") == "1":
            raise
        has_vulkan = False
    if has_vulkan:
        vm = adeadvm.load(str(MLP), devices="gpu0,cpu")
        for _ in range(2):  # the second run's split follows the first run's speeds
            assert vm.run(x=x)["y"].tobytes() == want.tobytes()
    with pytest.raises(adeadvm.Error, match="`tpu` is not `cpu` or `gpuN`") as e:
        adeadvm.load(str(MLP), devices="cpu,tpu")
    assert e.value.status == 2  # ADEADVM_STATUS_INVALID_ARGUMENT


def test_a_pipeline_over_stages_gives_the_single_run_bits():
    """pipeline= reaches the C config: the program is cut into stages, one per listed executor,
    and the output is one run's bits (stages on the CPU and, where there is one, Vulkan device 0)."""
    x = np.load(X)
    want = adeadvm.load(str(MLP), backend="cpu").run(x=x)["y"]
    assert adeadvm.load(str(MLP), pipeline="cpu,cpu").run(x=x)["y"].tobytes() == want.tobytes()
    vm = adeadvm.load(str(MLP), pipeline="cpu,cpu", micro_batches=3)
    assert vm.run(x=x)["y"].tobytes() == want.tobytes()
    try:
        adeadvm.load(str(MLP), backend="vulkan")
        has_vulkan = True
    except adeadvm.Error:
        if os.environ.get("ADEADVM_REQUIRE_VULKAN") == "1":
            raise
        has_vulkan = False
    if has_vulkan:
        got = adeadvm.load(str(MLP), pipeline="gpu0,cpu").run(x=x)["y"]
        assert got.tobytes() == want.tobytes()
    with pytest.raises(adeadvm.Error, match="cannot both be set") as e:
        adeadvm.load(str(MLP), devices="cpu", pipeline="cpu,cpu")
    assert e.value.status == 2


def test_sessions_on_threads_agree():
    vm = adeadvm.load(str(MLP))
    x = np.load(X)
    results = [None] * 4
    errors = []

    def work(i):
        try:
            results[i] = vm.clone().run(x=x)["y"].tobytes()
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert all(r == results[0] for r in results) and results[0] is not None
    assert vm.run(x=x)["y"].tobytes() == results[0]


@pytest.mark.parametrize(
    "dtype,np_dtype",
    [("f32", np.float32), ("f16", np.float16), ("i32", np.int32), ("bf16", np.uint16)],
)
def test_dtypes_round_trip(tmp_path, dtype, np_dtype):
    src = tmp_path / ("add_%s.s" % dtype)
    src.write_text(
        ".dim N\n.input %%x %s[N]\n.output y %s[N]\n"
        "    ALLOC %%t: %s[N]\n    ADD %%t, %%x, %%x\n    STORE y, %%t\n    FREE %%t\n    HALT\n"
        % (dtype, dtype, dtype)
    )
    vm = adeadvm.load(str(src))
    if dtype == "bf16":
        # bf16 travels as its 16 bits: 1.5 and -2.0 are 0x3fc0 and 0xc000.
        x = np.array([0x3FC0, 0xC000], np.uint16)
        want = np.array([0x4040, 0xC080], np.uint16)
    else:
        x = np.array([3, -2], np_dtype)
        want = x + x
    y = vm.run(x=x)["y"]
    assert y.dtype == np.dtype(np_dtype).newbyteorder("<")
    assert y.tobytes() == want.tobytes()


def test_rank0_inputs_keep_their_shape(tmp_path):
    # A 0-d numpy array (and a numpy scalar) binds to a rank-0 input, as the CLI accepts a
    # rank-0 .npy; the output is 0-d too, with the bits of the CLI's run.
    src = tmp_path / "scalar.s"
    src.write_text(
        ".input %x f32[]\n.input %k i32[]\n.output y f32[]\n.output j i32[]\n"
        "    ALLOC %t: f32[]\n    MUL %t, %x, %x\n    STORE y, %t\n    FREE %t\n"
        "    ALLOC %u: i32[]\n    ADD %u, %k, %k\n    STORE j, %u\n    FREE %u\n    HALT\n"
    )
    vm = adeadvm.load(str(src), backend="cpu")
    for x, k in [(np.array(1.5, np.float32), np.array(-7, np.int32)), (np.float32(3.0), np.int32(21))]:
        outs = vm.run(x=x, k=k)
        assert outs["y"].shape == () and outs["y"].dtype == np.float32
        assert outs["y"].tobytes() == (np.float32(x) * np.float32(x)).tobytes()
        assert outs["j"].shape == () and int(outs["j"]) == 2 * int(k)
    # A rank-0 input still refuses a shape-(1,) array, with the VM's message.
    with pytest.raises(adeadvm.Error):
        vm.run(x=np.array([1.5], np.float32), k=np.array(1, np.int32))
    # Against the CLI, bit for bit.
    xp = tmp_path / "x.npy"
    kp = tmp_path / "k.npy"
    np.save(xp, np.array(1.25, np.float32))
    np.save(kp, np.array(5, np.int32))
    want = cli_output(tmp_path, src, {"x": xp, "k": kp}, "y")
    got = vm.run(x=np.load(xp), k=np.load(kp))["y"]
    assert want.shape == () and got.shape == () and want.tobytes() == got.tobytes()


def test_device_hung_after_a_gpu_timeout(tmp_path):
    """After a run fails by ADEADVM_GPU_TIMEOUT, device_hung() says so, and a program leaving by
    os._exit (as it should) ends cleanly; before it, device_hung() is False."""
    if os.environ.get("ADEADVM_REQUIRE_VULKAN") != "1":
        try:
            adeadvm.load(str(MLP), backend="vulkan")
        except adeadvm.Error as e:
            pytest.skip("no Vulkan device: %s" % e)
    spv = REPO / "tests" / "support" / "kernels" / "spin.spv"
    (tmp_path / "spin.spv").write_bytes(spv.read_bytes())
    (tmp_path / "spin.s").write_text(
        ".tier fast\n.input %x f32[64]\n.tensor %y f32[64]\n.output y f32[64]\n"
        '.spirv spin = file("spin.spv")\n'
        '.kernel k = spin "main" bindings(%x, %y) push(u32 65535, u32 64) groups(65535, 1, 1)\n'
        "ALLOC %y\nKERNEL k\nGPU_SYNC\nSTORE y, %y\nFREE %y\n"
    )
    script = (
        "import os, sys, numpy as np\n"
        "sys.path.insert(0, %r)\n"
        "import adeadvm\n"
        "print('before', adeadvm.device_hung())\n"
        "vm = adeadvm.load('spin.s', backend='vulkan')\n"
        "try:\n"
        "    vm.run(x=np.ones(64, np.float32))\n"
        "except adeadvm.Error as e:\n"
        "    print('error', e)\n"
        "print('after', adeadvm.device_hung(), flush=True)\n"
        "os._exit(0 if adeadvm.device_hung() else 3)\n" % str(REPO / "python")
    )
    env = dict(os.environ, ADEADVM_GPU_TIMEOUT="1")
    out = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "before False"
    assert lines[1].startswith("error ") and lines[1].endswith(
        "the GPU did not finish a batch within 1 s (set ADEADVM_GPU_TIMEOUT to wait longer)"
    ), lines[1]
    assert lines[2] == "after True"
