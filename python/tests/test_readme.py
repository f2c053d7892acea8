"""The README's C and Python commands, run exactly as written, as a new user would from a fresh
clone: the C example built and run from the repository root, and the Python binding installed
with the README's pip line into a fresh virtual environment and imported from another folder.

Slow (a release build of the library, and pip builds it again inside the package) and it needs
PyPI (pip fetches setuptools-rust and numpy), so it runs in CI's Python step (.ci/run), not in
`cargo test`. tests/ffi.rs checks the C commands against the README in `cargo test`."""

import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
README = (REPO / "README.md").read_text()


def block_after(marker, lang):
    """The first ```lang block after `marker` in the README, as its lines."""
    at = README.index(marker)
    m = re.compile(r"```%s\n(.*?)```" % lang, re.S).search(README, at)
    assert m, "no ```%s block after %r" % (lang, marker)
    return m.group(1).splitlines()


def clean_env(**extra):
    """The environment of a fresh shell: nothing that would find the package or library
    another way than the install (PYTHONPATH, ADEADVM_LIB) or move cargo's output
    (CARGO_TARGET_DIR: the README's paths are the default target/)."""
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "ADEADVM_LIB", "CARGO_TARGET_DIR")}
    env.update(extra)
    return env


def sh(line, cwd, env):
    done = subprocess.run(["bash", "-c", line], cwd=cwd, env=env, capture_output=True, text=True)
    assert done.returncode == 0, "%s\nexit %d\n%s\n%s" % (line, done.returncode, done.stdout, done.stderr)
    return done.stdout


def test_c_example_as_the_readme_writes_it():
    lines = block_after("Build and run the example from the repository root", "sh")
    assert lines[0] == "cargo build --release --lib", lines
    built = [REPO / "mlp"]
    try:
        out = ""
        for line in lines:
            out = sh(line, REPO, clean_env())
        # The last line ran the example: the program's output y, then "ok".
        assert "y: dtype 0 shape [2, 10] 80 bytes\n" in out, out
        assert out.endswith("ok\n"), out
        # The static link, as the text after the block writes it.
        static = README[README.index("link it statically"):].split("`")[1]
        assert static.startswith("cc examples/c/main.c "), static
        sh(static, REPO, clean_env())
        again = sh(lines[-1], REPO, clean_env())
        assert again == out
        # Called wrongly, it prints its usage and exits with 2.
        wrong = subprocess.run(["./mlp"], cwd=REPO, env=clean_env(), capture_output=True, text=True)
        assert wrong.returncode == 2, wrong
        assert wrong.stderr.startswith("usage: ./mlp PROGRAM COLS\n"), wrong.stderr
    finally:
        for f in built:
            if f.exists():
                f.unlink()


def test_python_install_as_the_readme_writes_it(tmp_path):
    install = block_after("**Python**", "sh")
    assert install == ["pip install ./python"], install
    snippet = "\n".join(block_after("**Python**", "python"))
    env_dir = tmp_path / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    bin_dir = env_dir / "bin"
    # A fresh shell with the environment activated: its pip and python come first on PATH.
    env = clean_env(PATH="%s%s%s" % (bin_dir, os.pathsep, os.environ["PATH"]), VIRTUAL_ENV=str(env_dir))
    sh(install[0], REPO, env)

    # Another folder, holding only the files the snippet names (at the same relative paths),
    # and a folder named `python` as in the repository, to show nothing is found through it.
    elsewhere = tmp_path / "elsewhere"
    (elsewhere / "programs" / "data").mkdir(parents=True)
    shutil.copy(REPO / "programs" / "mlp.s", elsewhere / "programs" / "mlp.s")
    shutil.copy(REPO / "programs" / "data" / "mlp_x.npy", elsewhere / "programs" / "data" / "mlp_x.npy")
    (elsewhere / "snippet.py").write_text(snippet + "\n")
    py = str(bin_dir / "python")
    out = sh("%s snippet.py" % py, elsewhere, env)
    assert re.match(r"^[0-9a-f]{64} \[\[", out), out

    # The library loaded is the one installed inside the package, not the repository's.
    where = sh("%s -c 'import adeadvm; print(adeadvm.__file__); print(adeadvm.library_path())'" % py, elsewhere, env)
    package_file, library = where.splitlines()
    assert Path(package_file).resolve().is_relative_to(env_dir.resolve()), where
    assert Path(library).parent == Path(package_file).parent, where
    assert Path(library).name.startswith("_libadeadvm"), where
    # ADEADVM_LIB still overrides it.
    override = sh(
        "%s -c 'import adeadvm; print(adeadvm.library_path())'" % py,
        elsewhere,
        dict(env, ADEADVM_LIB="/somewhere/libadeadvm.so"),
    )
    assert override == "/somewhere/libadeadvm.so\n", override

