#!/usr/bin/env bash
# test.sh: builds tutti (installing missing packages first) and runs every test suite; extra
# arguments go to `meson test`, e.g. `scripts/test.sh --suite unit`.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/build.sh

start=$SECONDS
if meson test -C build --print-errorlogs "$@"; then
    echo "test.sh: PASSED in $((SECONDS - start)) s (log: build/meson-logs/testlog.txt)"
else
    rc=$?
    echo "test.sh: FAILED (meson test exit $rc) in $((SECONDS - start)) s; log: build/meson-logs/testlog.txt" >&2
    exit "$rc"
fi
