#!/usr/bin/env bash
# Build the bench-only TFX environment, bench/.venv-tfx: the project's requirements.lock plus tfx 1.16.0 and the few
# packages its LocalDagRunner taxi pipeline needs to import and run (bench/tfx/requirements.txt, each --no-deps),
# bytecode compiled. Used only by bench/bench_tfx.py; the project never imports TFX.
#
#   bash bench/tfx/setup.sh            # prints the environment's python when done
#
# Idempotent: a stamp in the environment holds the hash of its inputs (the lock, requirements.txt, this script,
# the interpreter's version); when it matches, nothing is done. uv from PATH, else the project's .venv/bin/uv,
# else uv bootstrapped with pip into the new environment (the version the lock pins). Needs the package index
# (or a warm uv cache); no compilers: wheels only.
set -euo pipefail
cd "$(dirname "$0")/../.."
VENV=bench/.venv-tfx
PYTHON="${SLIPWAY_PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null 2>&1 || PYTHON=python3
UV_VERSION=0.9.5
stamp_file="$VENV/.bench-tfx-stamp"
stamp_value="$( (cat requirements.lock bench/tfx/requirements.txt bench/tfx/setup.sh; "$PYTHON" --version) \
    | sha256sum | cut -d' ' -f1)"

if [ -f "$stamp_file" ] && [ "$(cat "$stamp_file")" = "$stamp_value" ] && [ -x "$VENV/bin/python" ]; then
    echo "$VENV/bin/python"
    exit 0
fi

started=$SECONDS
rm -rf "$VENV"
echo "bench-tfx: creating $VENV with $("$PYTHON" --version)" >&2
"$PYTHON" -m venv "$VENV"

UV="$(command -v uv || true)"
[ -z "$UV" ] && [ -x .venv/bin/uv ] && UV=.venv/bin/uv
if [ -z "$UV" ]; then
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION"
    UV="$VENV/bin/uv"
fi

echo "bench-tfx: syncing $VENV with requirements.lock" >&2
"$UV" pip sync --quiet --python "$VENV/bin/python" --compile-bytecode --require-hashes requirements.lock
echo "bench-tfx: adding bench/tfx/requirements.txt without dependencies" >&2
# tfx 1.16 declares Requires-Python < 3.11: installed with --no-deps on the locked TF 2.16 / TFX-library family.
"$UV" pip install --quiet --python "$VENV/bin/python" --no-deps --only-binary :all: --require-hashes \
    -r bench/tfx/requirements.txt
# Every module compiled ahead (uv compiled the lock's; this covers the additions): without .pyc files the first
# import of TFX in each fresh process costs about three times as much. Python-2-only files some packages ship
# (templates, examples) do not compile; they are never imported, so their errors are not fatal.
site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
"$VENV/bin/python" -m compileall -q -j 0 "$site" >/dev/null 2>&1 || true
echo "bench-tfx: checking that TFX and its LocalDagRunner import" >&2
TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=3 "$VENV/bin/python" -W ignore -c \
    'from tfx import v1 as tfx; tfx.orchestration.LocalDagRunner' >/dev/null 2>&1 \
    || { echo "bench-tfx: importing tfx failed in $VENV" >&2; exit 1; }
echo "$stamp_value" > "$stamp_file"
echo "bench-tfx: $VENV ready in $((SECONDS - started)) s" >&2
echo "$VENV/bin/python"
