#!/usr/bin/env bash
# fetch-onnx-node-tests.sh — gets ONNX's backend node test suite (about 1650 tests: each a folder
# with model.onnx and test_data_set_*/input_*.pb, output_*.pb) into a cache folder and prints
# that folder on stdout (everything else goes to stderr).
#
#     dir=$(scripts/fetch-onnx-node-tests.sh)     # then $dir/test_add/model.onnx, ...
#
# Source: the onnx wheel on PyPI, which ships the suite as ONNX generates it
# (onnx/backend/test/data/node/, the output of `backend-test-tools generate-data` over
# onnx/backend/test/case/node), fetched with `pip download --no-deps` for a pinned version and
# platform (the test data is the same in every platform's wheel; nothing is installed, so no
# Python version or numpy is needed). The wheel is checked against the SHA-256 below. The
# folder is ${ADEADVM_CACHE:-$HOME/.cache/adeadvm}/onnx-node-tests-$VERSION. Idempotent: when
# the folder is complete (a stamp holding the wheel's hash), nothing is downloaded.
set -euo pipefail

VERSION=1.20.1
WHEEL_NAME="onnx-$VERSION-cp311-cp311-manylinux_2_27_x86_64.manylinux_2_28_x86_64.whl"
WHEEL_SHA256=2297f428c51c7fc6d8fad0cf34384284dfeff3f86799f8e83ef905451348ade0
PREFIX=onnx/backend/test/data/node/

die() {
    echo "fetch-onnx-node-tests: error: $*" >&2
    exit 1
}

CACHE="${ADEADVM_CACHE:-${HOME:?HOME is not set (or set ADEADVM_CACHE)}/.cache/adeadvm}"
case "$CACHE" in
    /*) ;;
    *) CACHE="$PWD/$CACHE" ;; # printed paths are absolute, usable from any folder
esac
DEST="$CACHE/onnx-node-tests-$VERSION"

PY=""
for candidate in python3 python; do
    if command -v "$candidate" >/dev/null 2>&1; then
        PY="$candidate"
        break
    fi
done
[ -n "$PY" ] || die "python3 is not installed; it is needed to run pip (apt-get install python3 python3-pip)"

if [ -f "$DEST/.complete" ] && [ "$(cat "$DEST/.complete")" = "$WHEEL_SHA256" ]; then
    echo "fetch-onnx-node-tests: $DEST is complete, nothing to download" >&2
    echo "$DEST"
    exit 0
fi

"$PY" -m pip --version >/dev/null 2>&1 \
    || die "pip is not available for $PY (install it: apt-get install python3-pip, or $PY -m ensurepip)"

mkdir -p "$CACHE" || die "cannot create the cache folder $CACHE"
WORK="$(mktemp -d "$CACHE/.onnx-fetch.XXXXXX")" || die "cannot create a temporary folder in $CACHE"
trap 'rm -rf "$WORK"' EXIT

echo "fetch-onnx-node-tests: downloading onnx==$VERSION from PyPI (about 17 MB) ..." >&2
if ! "$PY" -m pip download --no-deps --no-cache-dir --disable-pip-version-check -q \
    --only-binary=:all: --python-version 3.11 --platform manylinux_2_28_x86_64 \
    -d "$WORK/wheel" "onnx==$VERSION" >&2; then
    die "pip could not download onnx==$VERSION (is the network or PyPI reachable? a proxy needs HTTPS_PROXY)"
fi
WHEEL="$WORK/wheel/$WHEEL_NAME"
[ -f "$WHEEL" ] || die "pip left no $WHEEL_NAME in $WORK/wheel"

"$PY" - "$WHEEL" "$WHEEL_SHA256" "$PREFIX" "$WORK/out" <<'EOF' || die "the wheel could not be checked or unpacked (see above)"
import hashlib, os, sys, zipfile
wheel, want, prefix, out = sys.argv[1:5]
h = hashlib.sha256()
with open(wheel, "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
        h.update(block)
if h.hexdigest() != want:
    sys.exit("fetch-onnx-node-tests: error: %s has SHA-256 %s, expected %s" % (wheel, h.hexdigest(), want))
n = 0
with zipfile.ZipFile(wheel) as z:
    for info in z.infolist():
        if not info.filename.startswith(prefix) or info.is_dir():
            continue
        rel = info.filename[len(prefix):]
        if rel.startswith("/") or ".." in rel.split("/"):
            sys.exit("fetch-onnx-node-tests: error: unexpected member %s" % info.filename)
        path = os.path.join(out, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(z.read(info))
        n += 1
if n == 0:
    sys.exit("fetch-onnx-node-tests: error: no %s in %s" % (prefix, wheel))
print("fetch-onnx-node-tests: %d files unpacked" % n, file=sys.stderr)
EOF
echo "$WHEEL_SHA256" > "$WORK/out/.complete"
rm -rf "$DEST"
mv "$WORK/out" "$DEST" || die "cannot move the tests into $DEST"
echo "fetch-onnx-node-tests: tests ready in $DEST" >&2
echo "$DEST"
