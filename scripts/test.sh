#!/usr/bin/env bash
# test.sh: builds tutti (installing missing packages and the venv first) and runs every test
# suite, the PyTorch backend's (suite 'torch', run by the venv's Python) included, then the
# same under AddressSanitizer+UBSan (every suite) and ThreadSanitizer (the threading suites);
# the sanitizer builds leave the Python extension out; then a clang build with libFuzzer runs
# each fuzzing harness (tests/fuzz/) for TUTTI_FUZZ_SECONDS (8) from the corpus in the
# repository. Extra arguments go to `meson test`, e.g. `scripts/test.sh --suite unit`;
# TUTTI_SANITIZERS=0 skips the sanitizer builds, TUTTI_FUZZ_SECONDS=0 the fuzzing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/build.sh
# build/ was configured by the venv's meson (build.sh): run meson, ninja and Python from there
export PATH="$PWD/.venv/bin:$PATH"

# Open MPI's mpirun refuses to start, even on one node, when it finds neither ssh nor rsh (as in
# a bare container); its "isolated" launcher starts local ranks without them.
if ! command -v ssh >/dev/null 2>&1 && ! command -v rsh >/dev/null 2>&1; then
    export OMPI_MCA_plm=isolated
fi

# meson runs as many parallel tests at once as the machine has CPUs (cgroup quotas aside); the
# multi-rank tests marked parallel (tests/meson.build) were tried two at a time, so at most two.
export MESON_TESTTHREADS=${MESON_TESTTHREADS:-2}

start=$SECONDS
failed=()
summaries=()
beside=()
run_suite() { # run_suite NAME BUILD_DIR [meson test args...]
    # With `beside` set (meson test arguments naming tests that mostly wait: suite 'waits',
    # tests/meson.build), those run at the same time as the others, which they hardly slow: a
    # second `meson test` with its own log files (testlog-beside.*), whose output is printed
    # when both are done. Both run what the build left (--no-rebuild): neither may relink a
    # binary the other is running.
    local name=$1 dir=$2
    shift 2
    echo "test.sh: == $name =="
    local t0=$SECONDS wpid="" wlog=$dir/meson-logs/beside.txt rebuild=()
    if [ ${#beside[@]} -gt 0 ]; then
        rebuild=(--no-rebuild)
        mkdir -p "$dir/meson-logs"
        meson test -C "$dir" --no-rebuild --print-errorlogs --logbase testlog-beside \
            "${beside[@]}" >"$wlog" 2>&1 &
        wpid=$!
    fi
    if ! meson test -C "$dir" "${rebuild[@]}" --print-errorlogs "$@"; then
        failed+=("$name ($dir/meson-logs/testlog.txt)")
        summaries+=("$dir/meson-logs/testlog.json")
    fi
    if [ -n "$wpid" ]; then
        local wrc=0
        wait "$wpid" || wrc=$?
        echo "test.sh: $name: the tests run beside the others (${beside[*]}):"
        cat "$wlog"
        if [ "$wrc" != 0 ]; then
            failed+=("$name, beside ($dir/meson-logs/testlog-beside.txt)")
            summaries+=("$dir/meson-logs/testlog-beside.json")
        fi
    fi
    # what each stage costs, for keeping the whole run short (builds not counted)
    echo "test.sh: $name took $((SECONDS - t0)) s (run so far: $((SECONDS - start)) s)"
}

sanitizer_build() { # sanitizer_build DIR SANITIZERS
    # -Dtorch=disabled: a Python extension cannot run under ASan/TSan without preloading the
    # sanitizer runtime into the interpreter
    local opts=(-Db_sanitize="$2" -Db_lundef=false -Dtorch=disabled)
    if [ -f "$1/meson-private/coredata.dat" ]; then
        meson setup --reconfigure "$1" "${opts[@]}" >/dev/null ||
            meson setup --wipe "$1" "${opts[@]}" >/dev/null
    else
        meson setup "$1" "${opts[@]}" >/dev/null
    fi
    meson compile -C "$1" >/dev/null
}

if [ $# -eq 0 ]; then
    beside=(--suite waits)
    run_suite "tests" build --no-suite waits
else
    run_suite "tests" build "$@"
fi

if [ "${TUTTI_SANITIZERS:-1}" != 0 ] && [ $# -eq 0 ]; then
    sanitizer_build build-asan address,undefined
    # CK_TIMEOUT_MULTIPLIER: the sanitizers run 2-10x slower; Check's per-case timeouts (the
    # meson ones have room enough) are for a hang, not for speed.
    beside=(--suite waits)
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
        CK_TIMEOUT_MULTIPLIER=2 run_suite "AddressSanitizer + UBSan" build-asan --no-suite waits
    sanitizer_build build-tsan thread
    # One at a time: ThreadSanitizer runs 5-15x slower, and these tests' own deadlines (2-5 s
    # for a failure to be seen) are not scaled by CK_TIMEOUT_MULTIPLIER. Beside them, one at a
    # time too, the two that mostly sleep.
    beside=(--num-processes 1 check_p2p_waits check_failure)
    TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 CK_TIMEOUT_MULTIPLIER=4 \
        run_suite "ThreadSanitizer" build-tsan --num-processes 1 check_p2p check_shrink \
        check_split check_workers check_oob check_bootstrap check_create check_p2p_engine \
        check_placement check_trace
    beside=()
fi

# Fuzzing: what a harness finds new stays in build-fuzz/corpus/ (never in the repository's
# corpus); a crash, a leak or a broken invariant is saved in build-fuzz/artifacts/ and fails the
# run. Each harness gets a bounded time: seconds, not minutes.
fuzz_seconds=${TUTTI_FUZZ_SECONDS:-8}
if [ "$fuzz_seconds" != 0 ] && [ $# -eq 0 ]; then
    echo "test.sh: == fuzzing, ${fuzz_seconds} s per harness =="
    fopts=(-Dfuzz=true -Db_sanitize=address,undefined -Db_lundef=false -Dtorch=disabled)
    if [ -f build-fuzz/meson-private/coredata.dat ]; then
        CC=clang meson setup --reconfigure build-fuzz "${fopts[@]}" >/dev/null ||
            CC=clang meson setup --wipe build-fuzz "${fopts[@]}" >/dev/null
    else
        CC=clang meson setup build-fuzz "${fopts[@]}" >/dev/null
    fi
    meson compile -C build-fuzz >/dev/null
    mkdir -p build-fuzz/artifacts
    for h in store_server store_client env layout liveness; do
        mkdir -p "build-fuzz/corpus/$h"
        log=build-fuzz/fuzz_$h.log
        if build-fuzz/tests/fuzz/fuzz_$h -max_total_time="$fuzz_seconds" -timeout=10 \
            -rss_limit_mb=2048 -artifact_prefix="build-fuzz/artifacts/$h-" \
            "build-fuzz/corpus/$h" "tests/fuzz/corpus/$h" >"$log" 2>&1; then
            echo "test.sh: fuzz_$h: $(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1)"
        else
            tail -30 "$log" >&2
            failed+=("fuzz_$h ($log, build-fuzz/artifacts/)")
        fi
    done
    echo "test.sh: fuzzing done (run so far: $((SECONDS - start)) s)"
fi

if [ ${#failed[@]} -eq 0 ]; then
    echo "test.sh: PASSED in $((SECONDS - start)) s"
else
    # The end of a long log is often all that is kept: say there what failed, and how.
    for j in "${summaries[@]}"; do
        python3 scripts/failsummary.py "$j" >&2 || true
    done
    printf 'test.sh: FAILED: %s\n' "${failed[@]}" >&2
    echo "test.sh: FAILED in $((SECONDS - start)) s" >&2
    exit 1
fi
