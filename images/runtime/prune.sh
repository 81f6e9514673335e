#!/usr/bin/env bash
# What no pipeline step uses, removed from the runtime image's Python environment. images/runtime/Dockerfile runs
# it in the environment stage, in the same RUN that installs /opt/venv (and the compilers, purged after it).
#   usage: prune.sh VENV PRUNE_LIST UV
# readelf and strip come from binutils (installed with the compilers). tests/test_images.py checks the
# result, and that every module a step imports still imports.
set -euo pipefail
venv="$1" list="$2" uv="$3"
site="$venv/lib/python3.11/site-packages"

# The distributions in the list: locked because the TFX libraries declare them, never imported by a step.
"$uv" pip uninstall --quiet --python "$venv/bin/python" -r "$list"
# TensorFlow's C++ headers (420 MB): only a build reads them, and Horovod is built before this runs.
rm -rf "$site/tensorflow/include"
# The test suites that packages ship beside their code: no package imports its own tests/ at run time.
find "$site" -depth -type d -name tests -exec rm -rf {} +
# Debug symbols (--strip-debug keeps the symbol tables: tracebacks, dlsym and profilers see the same names), in
# the shared objects that have them only, so no other file is rewritten. Never the libraries auditwheel grafted
# into `<dist>.libs/` folders: patchelf has moved their load segments, and strip's rewrite leaves them unloadable
# (measured: scipy's OpenBLAS, and with it scipy, sklearn and TFMA's metrics, failed to import).
find "$venv" -type f \( -name '*.so' -o -name '*.so.*' \) -not -path '*.libs/*' -print0 |
    while IFS= read -r -d '' library; do
        sections="$(readelf -S -W "$library" 2>/dev/null || true)"
        if [[ $sections == *" .debug_"* ]]; then
            strip --strip-debug "$library"
        fi
    done
