#!/usr/bin/env bash
# check.sh: a quick test of ccl-bench (TAP): every collective, the dtypes and ops oneCCL has, on
# 2 ranks under Intel MPI's mpirun and under MPICH's, each checked bit for bit with -c, plus the
# refusals (an op oneCCL lacks, bad flags) and one run that must fail (no rank 0 to meet).
# Exits 77 (skip) where bench/oneccl/setup.sh has not made .venv-oneccl/; nothing else runs it,
# so scripts/test.sh and scripts/demo.sh never need oneCCL. About a minute on 2 idle cores.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
exe=$PWD/.venv-oneccl/bin/ccl-bench
env=bench/oneccl/env
if [ ! -x "$exe" ]; then
    echo "1..0 # SKIP no $exe (bench/oneccl/setup.sh makes it)"
    exit 77
fi

n=0
fail=0
port=$((29600 + RANDOM % 300))
out=$(mktemp)
trap 'rm -f "$out"' EXIT
report() { # report OK DESCRIPTION: one TAP line, the output on failure
    n=$((n + 1))
    if [ "$1" = 1 ]; then
        echo "ok $n - $2"
    else
        echo "not ok $n - $2"
        sed 's/^/# /' "$out" | tail -25
        fail=1
    fi
}
# run LAUNCHER VARS... -- ccl-bench ARGS: 2 ranks, -c; passes when it exits 0 with every row right
run() {
    local launch=$1 vars=()
    shift
    while [ "$1" != -- ]; do vars+=("$1"); shift; done
    shift
    local cmd=(mpirun -n 2)
    [ "$launch" = mpich ] && cmd=(mpirun.mpich -bind-to core -n 2)
    port=$((port + 1))
    env "${vars[@]}" MASTER_PORT=$port timeout 180 $env "${cmd[@]}" "$exe" "$@" -c >"$out" 2>&1
    local rc=$?
    local ok=0
    [ $rc = 0 ] && grep -q "ranks 2  nodes 1" "$out" && ! grep -q WRONG "$out" &&
        [ "$(grep -c '^ *[0-9]' "$out")" -ge 1 ] && ok=1
    report $ok "$launch ${vars[*]} $*"
}

# The best configuration found by bench/oneccl/tune (docs/oneccl.md), and oneCCL's MPI transport.
ofi=(CCL_ATL_TRANSPORT=ofi FI_PROVIDER=tcp CCL_ATL_SHM=1 CCL_WORKER_OFFLOAD=0)
echo "1..21"
for coll in allreduce allgather alltoall reduce_scatter bcast reduce; do
    run impi "${ofi[@]}" -- $coll -b 4 -e 1M -f 16 -i 3 -x 1
done
run impi "${ofi[@]}" -- barrier -i 5 -x 1
for dt in bf16 fp16 fp64 int8 uint8 int64; do
    run impi "${ofi[@]}" -- allreduce -b 2 -e 256K -f 32 -i 3 -x 1 -d $dt
done
run impi "${ofi[@]}" -- allreduce -b 4 -e 64K -f 16 -i 3 -x 1 -d int32 -o max
run impi CCL_ATL_TRANSPORT=mpi CCL_WORKER_OFFLOAD=0 -- allreduce -b 4 -e 1M -f 16 -i 3 -x 1 -d bf16
run impi "${ofi[@]}" -- alltoall -b 4 -e 64K -f 16 -i 3 -x 1 -d bf16
run mpich "${ofi[@]}" -- allreduce -b 4 -e 1M -f 16 -i 3 -x 1
run mpich "${ofi[@]}" -- allgather -b 4 -e 64K -f 16 -i 3 -x 1 -d bf16

# refusals: an op oneCCL does not have, before oneCCL starts, said on stdout for bench/compare
MASTER_PORT=$((port + 1)) timeout 60 $env mpirun -n 2 "$exe" allreduce -o bxor -d int32 >"$out" 2>&1
rc=$?
report "$([ $rc = 2 ] && grep -q '^# ccl-bench: cannot run allreduce int32 bxor' "$out" && echo 1)" \
    "allreduce -o bxor is refused with exit 2 and a reason"
# oneCCL 2022.1 rejects avg on host buffers at its first call, alike on every rank: a refusal too
env "${ofi[@]}" MASTER_PORT=$((port + 3)) timeout 60 $env mpirun -n 2 "$exe" allreduce -o avg -e 64 \
    >"$out" 2>&1
rc=$?
report "$([ $rc = 2 ] && grep -q '^# ccl-bench: cannot run allreduce fp32 avg: oneCCL refuses it' "$out" &&
    echo 1)" "allreduce -o avg is refused with exit 2 and oneCCL's reason"
# a rank whose rank 0 never comes must fail within its deadline, saying why (RANK 1 alone)
RANK=1 WORLD_SIZE=2 MASTER_PORT=$((port + 2)) TUTTI_BENCH_RENDEZVOUS_S=3 timeout 60 $env "$exe" allreduce -e 8 >"$out" 2>&1
rc=$?
report "$([ $rc = 1 ] && grep -q 'did not hand out the key-value store' "$out" && echo 1)" \
    "rank 1 without rank 0 fails after the rendezvous deadline"
exit $fail
