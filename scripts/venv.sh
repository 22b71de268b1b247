#!/usr/bin/env bash
# venv.sh: makes .venv/, the Python environment of the PyTorch backend, its tests and benchmarks,
# with the python3 on PATH (3.11) and the versions pinned in python/requirements.txt. Run again,
# it installs only when the requirements changed since the last run. Prints nothing on success
# but what pip prints; `.venv/bin/python` is then the interpreter to use.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

py=${TUTTI_PYTHON:-python3}
req=python/requirements.txt
stamp=.venv/.tutti-requirements

if [ ! -x .venv/bin/python ]; then
    echo "venv.sh: creating .venv with $("$py" --version 2>&1) ($(command -v "$py"))"
    "$py" -m venv .venv
fi
if ! cmp -s "$req" "$stamp" 2>/dev/null; then
    echo "venv.sh: installing $req into .venv"
    .venv/bin/python -m pip install --disable-pip-version-check -q --upgrade pip </dev/null
    .venv/bin/python -m pip install --disable-pip-version-check -q -r "$req" </dev/null
    cp "$req" "$stamp"
fi
