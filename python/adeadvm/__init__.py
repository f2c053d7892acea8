"""adeadvm: run deterministic tensor programs from Python (ctypes over the C library).

    import adeadvm, numpy as np
    vm = adeadvm.load("programs/mlp.s", backend="auto", tier="strict")
    outs = vm.run(x=np.zeros((2, 784), np.float32))   # {"y": array(...)}
    vm.digest                                          # the program's BLAKE3, hex

The C library is found through ADEADVM_LIB (a path to libadeadvm.so) when set; else the one
installed inside this package (`pip install ./python` builds it and puts it here); else, for a
checkout used without installing (PYTHONPATH=python), in target/release or target/debug (or
$CARGO_TARGET_DIR) of the repository this package sits in.

Thread safety: a loaded program is shared by every VM made from it; each `VM` holds one session,
guarded by a lock, so a `VM` may be used from several threads (one run at a time). For parallel
runs, make one `VM` per thread with `vm.clone()` (it shares the loaded program).
"""

import ctypes
import os
import sys
import threading
from pathlib import Path

import numpy as np

__all__ = ["Error", "VM", "load", "library_path"]


class Error(Exception):
    """An adeadvm failure; str(e) is the VM's message, e.status the C status code."""

    def __init__(self, message, status=None):
        super().__init__(message)
        self.status = status


# Status and dtype codes (include/adeadvm.h).
OK = 0
_DTYPES = {0: np.dtype("<f4"), 1: np.dtype("<f2"), 2: np.dtype("<u2"), 3: np.dtype("<i4")}
_TIERS = {None: 0, "program": 0, "strict": 1, "fast": 2}


class _Config(ctypes.Structure):
    _fields_ = [
        ("backend", ctypes.c_char_p),
        ("tier", ctypes.c_uint32),
        ("threads", ctypes.c_uint32),
        ("max_memory", ctypes.c_uint64),
        ("max_steps", ctypes.c_uint64),
        ("max_device_memory", ctypes.c_uint64),
        ("devices", ctypes.c_char_p),
        ("pipeline", ctypes.c_char_p),
        ("micro_batches", ctypes.c_uint32),
    ]


def _bundled_library():
    """The library `pip install` put inside this package (adeadvm/_libadeadvm<suffix>), or None."""
    here = Path(__file__).resolve().parent
    found = sorted(here.glob("_libadeadvm*"))
    return str(found[0]) if found else None


def library_path():
    """Where the C library is loaded from."""
    env = os.environ.get("ADEADVM_LIB")
    if env:
        return env
    bundled = _bundled_library()
    if bundled:
        return bundled
    name = {"darwin": "libadeadvm.dylib", "win32": "adeadvm.dll"}.get(sys.platform, "libadeadvm.so")
    repo = Path(__file__).resolve().parents[2]
    roots = [Path(os.environ["CARGO_TARGET_DIR"])] if os.environ.get("CARGO_TARGET_DIR") else []
    roots.append(repo / "target")
    candidates = [r / p / name for r in roots for p in ("release", "debug")]
    found = [c for c in candidates if c.exists()]
    if not found:
        raise Error(
            "cannot find the adeadvm C library (this package carries none: it was not installed "
            "with `pip install ./python`; looked for %s); install it, build the library with "
            "`cargo build --lib`, or set ADEADVM_LIB" % ", ".join(str(c) for c in candidates)
        )
    # The newest build wins when both exist.
    return str(max(found, key=lambda c: c.stat().st_mtime))


_lib = None
_lib_lock = threading.Lock()


def _load_lib():
    global _lib
    with _lib_lock:
        if _lib is not None:
            return _lib
        lib = ctypes.CDLL(library_path())
        P = ctypes.c_void_p
        sz = ctypes.c_size_t
        st = ctypes.c_int
        sigs = {
            "adeadvm_last_error": (ctypes.c_char_p, []),
            "adeadvm_program_load": (st, [ctypes.c_char_p, ctypes.POINTER(P)]),
            "adeadvm_program_digest": (st, [P, ctypes.c_void_p, sz]),
            "adeadvm_program_tensor_count": (st, [P, ctypes.c_uint32, ctypes.POINTER(sz)]),
            "adeadvm_program_tensor_name": (st, [P, ctypes.c_uint32, sz, ctypes.POINTER(ctypes.c_char_p)]),
            "adeadvm_program_free": (None, [P]),
            "adeadvm_config_default": (st, [ctypes.POINTER(_Config)]),
            "adeadvm_session_new": (st, [P, ctypes.POINTER(_Config), ctypes.POINTER(P)]),
            "adeadvm_session_set_input": (
                st,
                [P, ctypes.c_char_p, ctypes.c_uint32, ctypes.POINTER(sz), sz, ctypes.c_void_p, sz],
            ),
            "adeadvm_session_run": (st, [P]),
            "adeadvm_session_output": (
                st,
                [
                    P,
                    ctypes.c_char_p,
                    ctypes.POINTER(ctypes.c_uint32),
                    ctypes.POINTER(sz),
                    sz,
                    ctypes.POINTER(sz),
                    ctypes.POINTER(ctypes.c_void_p),
                    ctypes.POINTER(sz),
                ],
            ),
            "adeadvm_session_generate": (
                st,
                [
                    P,
                    ctypes.POINTER(ctypes.c_int64),
                    ctypes.POINTER(sz),
                    sz,
                    sz,
                    ctypes.c_int64,
                    ctypes.POINTER(ctypes.c_int32),
                    sz,
                    ctypes.POINTER(ctypes.c_uint8),
                ],
            ),
            "adeadvm_program_eos_id": (st, [P, ctypes.POINTER(ctypes.c_uint32)]),
            "adeadvm_program_tokenize": (
                st,
                [P, ctypes.c_char_p, ctypes.c_uint32, ctypes.POINTER(ctypes.c_int32), sz, ctypes.POINTER(sz)],
            ),
            "adeadvm_program_detokenize": (
                st,
                [P, ctypes.POINTER(ctypes.c_int32), sz, ctypes.c_char_p, sz, ctypes.POINTER(sz)],
            ),
            "adeadvm_session_free": (None, [P]),
            "adeadvm_device_hung": (ctypes.c_uint32, []),
        }
        for name, (res, args) in sigs.items():
            f = getattr(lib, name)
            f.restype = res
            f.argtypes = args
        _lib = lib
        return lib


def _check(status):
    if status != OK:
        msg = _load_lib().adeadvm_last_error().decode("utf-8", "replace")
        raise Error(msg, status)


class _Program:
    """Owns a program handle; shared by VMs (freed when the last goes)."""

    def __init__(self, path):
        lib = _load_lib()
        self._lib = lib
        self.handle = ctypes.c_void_p()
        _check(lib.adeadvm_program_load(os.fsencode(str(path)), ctypes.byref(self.handle)))
        d = (ctypes.c_uint8 * 32)()
        _check(lib.adeadvm_program_digest(self.handle, d, 32))
        self.digest = bytes(d).hex()
        self.inputs = self._names(0)
        self.outputs = self._names(1)

    def _names(self, which):
        n = ctypes.c_size_t()
        _check(self._lib.adeadvm_program_tensor_count(self.handle, which, ctypes.byref(n)))
        out = []
        for i in range(n.value):
            p = ctypes.c_char_p()
            _check(self._lib.adeadvm_program_tensor_name(self.handle, which, i, ctypes.byref(p)))
            out.append(p.value.decode())
        return out

    def __del__(self):
        if getattr(self, "handle", None):
            self._lib.adeadvm_program_free(self.handle)
            self.handle = None


class VM:
    """One session of a loaded program. Create with `load()`."""

    def __init__(
        self,
        program,
        backend="auto",
        tier=None,
        threads=None,
        max_memory=None,
        max_steps=None,
        max_device_memory=None,
        devices=None,
        pipeline=None,
        micro_batches=None,
    ):
        if tier not in _TIERS:
            raise Error("unknown tier `%s`" % tier)
        lib = _load_lib()
        self._lib = lib
        self._program = program
        self._settings = dict(
            backend=backend,
            tier=tier,
            threads=threads,
            max_memory=max_memory,
            max_steps=max_steps,
            max_device_memory=max_device_memory,
            devices=devices,
            pipeline=pipeline,
            micro_batches=micro_batches,
        )
        cfg = _Config()
        _check(lib.adeadvm_config_default(ctypes.byref(cfg)))
        self._backend = backend.encode()  # kept alive for the call
        cfg.backend = self._backend
        cfg.tier = _TIERS[tier]
        cfg.threads = threads or 0
        cfg.max_memory = max_memory or 0
        cfg.max_steps = max_steps or 0
        cfg.max_device_memory = max_device_memory or 0
        # A list such as "gpu0,gpu1,cpu": the batch is split over those executors (every input
        # cut along its first axis, the outputs joined; strict tier: one device's bits).
        self._devices = None if devices is None else devices.encode()
        cfg.devices = self._devices
        # A list such as "gpu0,gpu1": the program is cut into stages, one per device, run one
        # after the other (each device holds its stage's constants; strict tier: one run's bits).
        self._pipeline = None if pipeline is None else pipeline.encode()
        cfg.pipeline = self._pipeline
        cfg.micro_batches = micro_batches or 0
        self._session = ctypes.c_void_p()
        _check(lib.adeadvm_session_new(program.handle, ctypes.byref(cfg), ctypes.byref(self._session)))
        self._lock = threading.Lock()

    @property
    def digest(self):
        """The program's BLAKE3 digest as 64 hex digits."""
        return self._program.digest

    @property
    def inputs(self):
        """Declared input names."""
        return list(self._program.inputs)

    @property
    def outputs(self):
        """Declared output names."""
        return list(self._program.outputs)

    def clone(self):
        """A new VM (its own session) sharing this one's loaded program, for another thread."""
        return VM(self._program, **self._settings)

    def run(self, **inputs):
        """Binds the named numpy inputs, runs once, returns {output name: numpy array}.

        Arrays are taken as float32, float16, int32, or uint16 (the bits of bf16); other dtypes
        are passed as is and the VM reports the mismatch. Outputs are copies.
        """
        with self._lock:
            for name, value in inputs.items():
                self._set_input(name, value)
            _check(self._lib.adeadvm_session_run(self._session))
            return {name: self._output(name) for name in self._program.outputs}

    @property
    def eos_id(self):
        """The end-of-text token of the vocabulary the program carries (`.vocab`)."""
        v = ctypes.c_uint32()
        _check(self._lib.adeadvm_program_eos_id(self._program.handle, ctypes.byref(v)))
        return v.value

    def tokenize(self, text, chat=False):
        """Token ids of `text` in the program's vocabulary; with chat=True the text is first wrapped
        as one user turn of the vocabulary's ChatML template (when it has one)."""
        n = ctypes.c_size_t()
        raw = text.encode("utf-8")
        status = self._lib.adeadvm_program_tokenize(self._program.handle, raw, int(chat), None, 0, ctypes.byref(n))
        if status != OK and n.value == 0:
            _check(status)
        ids = (ctypes.c_int32 * max(n.value, 1))()
        _check(self._lib.adeadvm_program_tokenize(self._program.handle, raw, int(chat), ids, n.value, ctypes.byref(n)))
        return list(ids[: n.value])

    def detokenize(self, ids):
        """The text of token ids in the program's vocabulary."""
        ids = [int(t) for t in ids]
        arr = (ctypes.c_int32 * max(len(ids), 1))(*ids)
        n = ctypes.c_size_t()
        status = self._lib.adeadvm_program_detokenize(self._program.handle, arr, len(ids), None, 0, ctypes.byref(n))
        if status != OK and n.value == 0:
            _check(status)
        buf = ctypes.create_string_buffer(max(n.value, 1))
        _check(self._lib.adeadvm_program_detokenize(self._program.handle, arr, len(ids), buf, n.value, ctypes.byref(n)))
        return buf.raw[: n.value].decode("utf-8")

    def generate(self, prompts, max_new, stop=None, chat=True):
        """Greedy generation with a generation program (programs/smollm2.s).

        prompts: a list of prompts, each a list of token ids or a string (tokenized with the
        program's vocabulary, as one ChatML user turn when chat=True and the vocabulary has that
        template); they run as one batch, and each prompt's result is the same bits as when it
        runs alone. max_new: tokens to generate per prompt at most. stop: the end-of-text id, or
        "eos" for the vocabulary's (None: exactly max_new tokens).
        Returns one dict per prompt: "ids" (the generated ids, without the stop token),
        "stopped" (whether it ended on `stop`), "logits" (float32 [kept, vocab]: the logits
        that chose its first tokens, as many as the program keeps) and, for string prompts,
        "text" (the generated ids decoded).
        """
        texts = [isinstance(p, str) for p in prompts]
        prompts = [self.tokenize(p, chat) if t else [int(x) for x in p] for p, t in zip(prompts, texts)]
        if stop == "eos":
            stop = self.eos_id
        n = len(prompts)
        flat = [t for p in prompts for t in p]
        ids = (ctypes.c_int64 * max(len(flat), 1))(*flat)
        lens = (ctypes.c_size_t * max(n, 1))(*[len(p) for p in prompts])
        out = (ctypes.c_int32 * max(n * max_new, 1))()
        stopped = (ctypes.c_uint8 * max(n, 1))()
        with self._lock:
            _check(
                self._lib.adeadvm_session_generate(
                    self._session,
                    ids,
                    lens,
                    n,
                    max_new,
                    -1 if stop is None else int(stop),
                    out,
                    n * max_new,
                    stopped,
                )
            )
            logits = self._output("logits")
        results = []
        for k in range(n):
            row = [out[k * max_new + i] for i in range(max_new)]
            got = [t for t in row if t >= 0]
            made = len(got) + (1 if stopped[k] else 0)
            r = {"ids": got, "stopped": bool(stopped[k]), "logits": logits[k, : min(made, logits.shape[1])].copy()}
            if texts[k]:
                r["text"] = self.detokenize(got)
            results.append(r)
        return results

    def _set_input(self, name, value):
        # np.asarray(order="C"), not np.ascontiguousarray: the latter turns a 0-d array (a
        # scalar input) into shape (1,), which a rank-0 input then refuses.
        a = np.asarray(value, order="C")
        codes = {np.dtype("float32"): 0, np.dtype("float16"): 1, np.dtype("uint16"): 2, np.dtype("int32"): 3}
        if a.dtype.newbyteorder("=") in codes and a.dtype.byteorder == ">":
            a = a.astype(a.dtype.newbyteorder("<"))
        code = codes.get(a.dtype.newbyteorder("="))
        if code is None:
            raise Error(
                "input %s: numpy dtype %s is not supported (use float32, float16, int32, or uint16 bits for bf16)"
                % (name, a.dtype)
            )
        shape = (ctypes.c_size_t * max(a.ndim, 1))(*a.shape)
        _check(
            self._lib.adeadvm_session_set_input(
                self._session,
                name.encode(),
                code,
                shape,
                a.ndim,
                a.ctypes.data_as(ctypes.c_void_p),
                a.nbytes,
            )
        )

    def _output(self, name):
        dtype = ctypes.c_uint32()
        shape = (ctypes.c_size_t * 64)()
        rank = ctypes.c_size_t()
        data = ctypes.c_void_p()
        nbytes = ctypes.c_size_t()
        _check(
            self._lib.adeadvm_session_output(
                self._session,
                name.encode(),
                ctypes.byref(dtype),
                shape,
                64,
                ctypes.byref(rank),
                ctypes.byref(data),
                ctypes.byref(nbytes),
            )
        )
        dims = tuple(shape[i] for i in range(rank.value))
        raw = ctypes.string_at(data.value, nbytes.value) if nbytes.value else b""
        return np.frombuffer(raw, dtype=_DTYPES[dtype.value]).reshape(dims).copy()

    def __del__(self):
        if getattr(self, "_session", None):
            self._lib.adeadvm_session_free(self._session)
            self._session = None


def device_hung():
    """Whether work on a Vulkan device of this process did not finish within ADEADVM_GPU_TIMEOUT
    (a run failed saying so) and may still be running in the driver. A program should then leave
    with os._exit: the driver's own teardown at exit can crash under work still running in it."""
    return bool(_load_lib().adeadvm_device_hung())


def load(path, **settings):
    """Loads a program (.bib, or .s assembled in memory) and returns a `VM` ready to run it.

    Settings, by name (those of `VM`): backend: "auto", "cpu" or "vulkan"; tier: None (the
    program's), "strict" or "fast"; threads: worker threads (None: every core); max_memory:
    bytes; max_steps: instructions per run; max_device_memory: bytes of device memory a run may
    need (None: the device's memory); devices: None, or a list such as "gpu0,gpu1,cpu" to split
    each run's batch over those executors (`backend` is then ignored; strict-tier outputs are
    one device's bits); pipeline: None, or a list such as "gpu0,gpu1" to cut the program into
    stages run one after the other, one per device, each holding only its stage's constants
    (`backend` is then ignored; strict-tier outputs are one device's bits); micro_batches: with
    pipeline, slices each run's batch flows through the stages in, every stage busy at once.
    """
    return VM(_Program(path), **settings)
