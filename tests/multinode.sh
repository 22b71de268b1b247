#!/usr/bin/env bash
# multinode.sh: runs tutti across two "hosts" made of network namespaces joined by a veth pair
# (2 ranks in each), so that ranks of one namespace talk over shm and across over ofi/tcp, and
# checks every collective's result with tutti-bench -c. Exits 77 (skip) without root or iproute2.
set -euo pipefail
bench=${1:?usage: multinode.sh path/to/tutti-bench}
[ "$(id -u)" = 0 ] && command -v ip >/dev/null || { echo "1..0 # SKIP needs root and ip"; exit 77; }
tag=tt$$
nsa=${tag}a nsb=${tag}b nsc=${tag}c
cleanup() { for ns in "$nsa" "$nsb" "$nsc"; do ip netns del "$ns" 2>/dev/null || true; done; }
trap cleanup EXIT
if ! ip netns add "$nsa" 2>/dev/null || ! ip netns add "$nsb" 2>/dev/null ||
   ! ip netns add "$nsc" 2>/dev/null; then
  echo "1..0 # SKIP cannot create network namespaces here"; exit 77
fi
ip link add "${tag}x" type veth peer name "${tag}y"
ip link set "${tag}x" netns "$nsa"
ip link set "${tag}y" netns "$nsb"
# A private test subnet that exists only between these two namespaces.
ip -n "$nsa" addr add 10.231.7.1/24 dev "${tag}x"
ip -n "$nsb" addr add 10.231.7.2/24 dev "${tag}y"
for ns in "$nsa" "$nsb" "$nsc"; do ip -n "$ns" link set lo up; done
ip -n "$nsa" link set "${tag}x" up
ip -n "$nsb" link set "${tag}y" up

port=29731
n=0
fail=0
# run COLL ARGS...: 4 ranks, 0-1 in namespace a, 2-3 in namespace b. With LOOPBACK=1: 2 ranks
# in namespace c, whose only interface is loopback, all over ofi.
run() {
  local pids=() r ns rc=0 out nranks=4 master=10.231.7.1 nodes=2 extra=(${EXTRA:-})
  if [ "${LOOPBACK:-0}" = 1 ]; then nranks=2 master=127.0.0.1 nodes=1 extra=(TUTTI_TRANSPORT=ofi); fi
  out=$(mktemp)
  for ((r = 0; r < nranks; r++)); do
    ns=$nsa; [ "$r" -ge 2 ] && ns=$nsb; [ "$nranks" = 2 ] && ns=$nsc
    ip netns exec "$ns" env RANK=$r WORLD_SIZE=$nranks MASTER_ADDR=$master MASTER_PORT=$port \
      TUTTI_TIMEOUT=30 "${extra[@]}" timeout 120 "$bench" "$@" -c >"$out.$r" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || rc=1; done
  port=$((port + 1))
  n=$((n + 1))
  if [ -n "${EXPECT_FAIL:-}" ]; then
    # every rank must fail, and say why
    if [ $rc = 1 ] && grep -q "$EXPECT_FAIL" "$out.0" "$out.3"; then rc=ok; fi
  elif [ $rc = 0 ] && grep -q "nodes $nodes" "$out.0"; then
    rc=ok
  fi
  if [ $rc = ok ]; then
    echo "ok $n - $*"
  else
    echo "not ok $n - $*"; fail=1
    for ((r = 0; r < nranks; r++)); do sed "s/^/# rank $r: /" "$out.$r"; done
  fi
  rm -f "$out" "$out".*
}
echo "1..11"
run allreduce -b 4 -e 4M -f 8 -i 3 -x 1
run allreduce -b 4 -e 1M -f 16 -i 3 -x 1 -a ring -d bf16
run allreduce -b 4 -e 1M -f 16 -i 3 -x 1 -a tree -d int32 -o max
run allgather -b 4 -e 1M -f 16 -i 3 -x 1
run alltoall -b 4 -e 1M -f 16 -i 3 -x 1
run reduce_scatter -b 4 -e 1M -f 16 -i 3 -x 1
run bcast -b 4 -e 1M -f 16 -i 3 -x 1
run reduce -b 4 -e 1M -f 16 -i 3 -x 1 -d fp64
run barrier -i 5 -x 1
EXTRA=TUTTI_TRANSPORT=shm EXPECT_FAIL="span 2 nodes" run allreduce -b 4 -e 4 -i 1 -x 1
LOOPBACK=1 run allreduce -b 4 -e 1M -f 16 -i 3 -x 1
exit $fail
