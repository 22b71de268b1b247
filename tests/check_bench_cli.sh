#!/usr/bin/env bash
# check_bench_cli.sh: the benchmark tools refuse bad flags, and runs that measure nothing, with a
# clear message and a non-zero exit (never a Python traceback, never exit 0 after measuring
# nothing): tutti-bench, bench/launch-matrix, bench/ab, bench/compare. Only argument checks and
# failures before any launch: no timing, nothing started that could hang.
# usage: check_bench_cli.sh SOURCE_DIR BUILD_DIR
set -u
src=${1:?usage: check_bench_cli.sh SOURCE_DIR BUILD_DIR}
build=${2:?usage: check_bench_cli.sh SOURCE_DIR BUILD_DIR}
bench=$build/bench/tutti-bench
fails=0
n=0

# expect WANT_RC TEXT -- command...: the exit status is WANT_RC, stderr+stdout hold TEXT, and
# there is no traceback
expect() {
    local want=$1 text=$2
    shift 3
    n=$((n + 1))
    local out rc
    out=$(timeout 60 "$@" 2>&1 </dev/null)
    rc=$?
    if [ "$rc" != "$want" ] || ! grep -qF -- "$text" <<<"$out" || grep -q Traceback <<<"$out"; then
        echo "not ok $n - $* : exit $rc (want $want), want \"$text\" in:"
        sed 's/^/#   /' <<<"$out" | tail -8
        fails=$((fails + 1))
    else
        echo "ok $n - $*"
    fi
}

# tutti-bench: refused before anything starts (no MASTER_ADDR needed)
expect 2 "holds no whole fp32 element" -- "$bench" allreduce -b 3 -e 3
expect 2 "holds no whole fp64 element" -- "$bench" allreduce -b 1 -e 7 -d fp64
expect 2 "holds no whole fp32 element" -- "$bench" allreduce -b 0 -e 0
expect 2 "unknown dtype" -- "$bench" allreduce -d bogus
expect 2 "-i" -- "$bench" allreduce -i 0
expect 2 "-f" -- "$bench" allreduce -f 1
expect 2 "unknown collective" -- "$bench" bogus
# a size whose buffer, rounded up, wraps past SIZE_MAX (it became a 64-byte buffer that the
# check fill wrote past): refused before any allocation, one rank (no rendezvous)
expect 1 "lower -e" -- "$bench" allreduce -e 18446744073709551615
expect 1 "lower -e" -- "$bench" allgather -e 18446744073709551615
# the help, however asked for (--help was "invalid option -- '-'", exit 2)
expect 0 "usage: tutti-bench" -- "$bench" -h
expect 0 "usage: tutti-bench" -- "$bench" --help
expect 0 "srun" -- "$bench" allreduce --help

lm=$src/bench/launch-matrix
expect 2 "unknown dtype" -- "$lm" -d bogus
expect 2 "-n 0" -- "$lm" -n 0
expect 2 "-i 0" -- "$lm" -i 0
expect 2 "-r 0" -- "$lm" -r 0
expect 2 "-f 1" -- "$lm" -f 1
expect 2 "larger than -e" -- "$lm" -b 64K -e 8
expect 2 "unknown launcher" -- "$lm" --launchers bogus
expect 1 "nothing to measure" -- "$lm" --build /nonexistent --launchers env --libs tutti -n 2 -e 64 -r 1

ab=$src/bench/ab
expect 2 "-r 0" -- "$ab" --a "$build" --b "$build" -r 0 -- allreduce -b 8 -e 8
expect 2 "-n 0" -- "$ab" --a "$build" --b "$build" -n 0 --launcher env -- allreduce -b 8 -e 8
expect 2 "-n -3" -- "$ab" --a "$build" --b "$build" -n -3 -- allreduce -b 8 -e 8
expect 2 "no tutti-bench there" -- "$ab" --a /nonexistent --b "$build" -- allreduce

expect 1 "tutti measured nothing" -- "$src/bench/compare" --build /nonexistent --only tutti \
    -b 8 -e 8 -r 1 -o /tmp/check_bench_cli_$$.png
rm -f /tmp/check_bench_cli_$$.png

# A program linked with tutti dies of SIGTERM and SIGINT as any program does (exit status 128 +
# the signal), writing nothing: Debian's libfabric loads libinfinipath, whose handlers exit(1)
# and leave a *.btr file in the working directory, unless libtutti puts the defaults back.
sigdir=$(mktemp -d)
bench_abs=$(cd "$(dirname "$bench")" && pwd)/tutti-bench
for sig in TERM INT; do
    n=$((n + 1))
    (cd "$sigdir" && exec "$bench_abs" allreduce -b 8 -e 8 -i 2000000000 >/dev/null 2>&1) &
    pid=$!
    # the guard's streams go nowhere: its sleep, left running after the guard is killed, would
    # hold the test's output open (meson waited the whole 60 s for it, twice)
    (sleep 60 && kill -9 "$pid" 2>/dev/null) >/dev/null 2>&1 </dev/null &
    guard=$!
    sleep 1
    kill -"$sig" "$pid"
    wait "$pid"
    rc=$?
    pkill -P "$guard" sleep 2>/dev/null
    kill "$guard" 2>/dev/null
    want=$((128 + $(kill -l "$sig")))
    left=$(ls "$sigdir")
    if [ "$rc" != "$want" ] || [ -n "$left" ]; then
        echo "not ok $n - tutti-bench killed by SIG$sig: exit $rc (want $want), left: ${left:-nothing}"
        fails=$((fails + 1))
    else
        echo "ok $n - tutti-bench killed by SIG$sig: exit $rc, nothing left behind"
    fi
done
rm -rf "$sigdir"

echo "1..$n"
[ "$fails" -eq 0 ]
