#!/usr/bin/env bash
# test.sh: builds tutti (installing missing packages first) and runs every test suite; extra
# arguments go to `meson test`, e.g. `scripts/test.sh --suite unit`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/build.sh

# Open MPI's mpirun refuses to start, even on one node, when it finds neither ssh nor rsh (as in
# a bare container); its "isolated" launcher starts local ranks without them.
if ! command -v ssh >/dev/null 2>&1 && ! command -v rsh >/dev/null 2>&1; then
    export OMPI_MCA_plm=isolated
fi

start=$SECONDS
if meson test -C build --print-errorlogs "$@"; then
    echo "test.sh: PASSED in $((SECONDS - start)) s (log: build/meson-logs/testlog.txt)"
else
    rc=$?
    echo "test.sh: FAILED (meson test exit $rc) in $((SECONDS - start)) s; log: build/meson-logs/testlog.txt" >&2
    exit "$rc"
fi
