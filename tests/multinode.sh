#!/usr/bin/env bash
# multinode.sh: tutti across "hosts" made of network namespaces (scripts/cluster.sh: one bridge,
# a shaped link per host), shm inside a host and ofi/tcp between hosts; TAP output. Each part
# brings up its own cluster and takes it down at the end, whatever happens. Exits 77 (skip)
# without root, iproute2 or namespaces.
#
#   multinode.sh BUILD_DIR hier      every collective checked by tutti-bench -c on 2 hosts x 2
#                                    ranks; multinode_check (hier against the flat algorithms,
#                                    bit for bit where the arithmetic allows, within the bound
#                                    otherwise) on 2 x 2, 3 x 2 placed cyclically, 3 ranks on 2
#                                    hosts, and with 2 workers; a rank that dies mid-run; the
#                                    shm-only refusal; a host whose only interface is loopback
#   multinode.sh BUILD_DIR ifaces    hosts with a second interface that reaches nothing: no
#                                    setting needed; TUTTI_SOCKET_IFNAME's syntax; one that
#                                    names the wrong interface or none fails clearly; FI_PROVIDER
#   multinode.sh BUILD_DIR launchers MPICH's Hydra and Open MPI's mpirun through the ssh
#                                    stand-in, and RANK/WORLD_SIZE by hand, block and cyclic
#   multinode.sh BUILD_DIR train     examples/train_bf16 across hosts (env and MPICH), and
#                                    examples/torch_ddp.py under torchrun (when the build has
#                                    tutti_torch): weights identical on every rank of every host
#   multinode.sh BUILD_DIR faults    on 2 hosts x 2 ranks, every collective family with a rank
#                                    SIGKILLed or SIGSTOPped (then continued) at a random moment,
#                                    and a host's link cut mid-run: every survivor fails with
#                                    an error naming the cause and the rank(s) well within the
#                                    timeout, no wrong result, no hang, no host's /dev/shm left
#                                    with anything (multinode_faults.c). Seeded: the seed is
#                                    printed, TUTTI_FAULT_SEED=S repeats a run. Then rank 1 under
#                                    RLIMIT_NOFILE 4 .. 64: every rank fails at once naming the
#                                    limit (node discovery, liveness mesh, ofi endpoint), or the
#                                    job works; a full /dev/shm, where the job works; 1% packet
#                                    loss on every link: exact results, and a SIGKILL and a
#                                    SIGSTOP under that loss found and named as above.
#                                    TUTTI_FAULT_TRIAL=KIND,FAMILY,COUNT,VICTIM,DELAY[,UNRESP]
#                                    (e.g. stop,reduce,4096,1,0.39) runs that trial only (UNRESP:
#                                    its TUTTI_UNRESPONSIVE, 2 s unless given),
#                                    TUTTI_FAULT_REPEAT times.
#   multinode.sh BUILD_DIR shrink    tutti_comm_shrink on 2 hosts x 2 ranks (multinode_shrink.c):
#                                    a rank SIGKILLed in a stream of allreduces (rank 0, the
#                                    store's owner; rank 3, on the other host); rank 1, then
#                                    rank 2 (other host) while the shrink runs; rank 2, then
#                                    rank 0 (the shrink's coordinator) while it runs; rank 1,
#                                    then rank 2 1 s later (in the shrunk communicator: the
#                                    survivors shrink again). Every survivor ends with a
#                                    communicator of exactly the living, renumbered in order,
#                                    with exact int32/fp32 allreduces, no hang, nothing left in
#                                    a host's /dev/shm. TUTTI_SHRINK_REPEAT=K runs each K times.
set -uo pipefail
build=${1:?usage: multinode.sh BUILD_DIR hier|ifaces|launchers|train|faults|shrink}
part=${2:?usage: multinode.sh BUILD_DIR hier|ifaces|launchers|train|faults|shrink}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
cluster="$root/scripts/cluster.sh"
build=$(cd "$build" && pwd)
bench="$build/bench/tutti-bench"
check="$build/tests/multinode_check"
faults="$build/tests/multinode_faults"
shrink="$build/tests/multinode_shrink"

if [ "$(id -u)" != 0 ] || ! command -v ip >/dev/null || ! command -v tc >/dev/null; then
    echo "1..0 # SKIP needs root and iproute2"
    exit 77
fi
if ! ip netns add "tmnprobe$$" 2>/dev/null; then
    echo "1..0 # SKIP cannot create network namespaces here"
    exit 77
fi
ip netns del "tmnprobe$$"

name="m$(($$ % 10000000))"    # this run's cluster, unlike any other's
tmp=$(mktemp -d)
lo_ns=""
cleanup() {
    bash "$cluster" down --name "$name" >/dev/null 2>&1
    [ -z "$lo_ns" ] || ip netns del "$lo_ns" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

n=0
fail=0
ok() { n=$((n + 1)); echo "ok $n - $*"; }
notok() {
    n=$((n + 1)); fail=1; echo "not ok $n - $1"
    [ -f "${2:-}" ] && sed 's/^/#   /' "$2" | tail -40
}

up() { # up ARGS...: a fresh cluster
    bash "$cluster" down --name "$name" >/dev/null 2>&1
    if ! bash "$cluster" up "$@" --name "$name" >"$tmp/up" 2>&1; then
        notok "cluster up $*" "$tmp/up"
        echo "1..$n"
        exit 1
    fi
}

launch() { # launch KIND [launch options] -- CMD...: output in $tmp/out, returns the status
    local kind=$1
    shift
    bash "$cluster" launch "$kind" --name "$name" --timeout 180 "$@" >"$tmp/out" 2>&1
}

# bench_ok DESC EXPECT_NODES [launch options] -- tutti-bench ARGS: every result checked
bench_ok() {
    local desc=$1 nodes=$2
    shift 2
    if launch env "$@" -c && grep -q "nodes $nodes " "$tmp/out"; then ok "$desc"; else notok "$desc" "$tmp/out"; fi
}

export TUTTI_TIMEOUT=60

part_hier() {
    up 2 --ranks-per-host 2 --rate 10gbit
    local a
    for a in "allreduce -b 4 -e 4M -f 8" "allreduce -b 4 -e 1M -f 16 -a ring -d bf16" \
        "allreduce -b 4 -e 1M -f 16 -a tree -d int32 -o max" "allreduce -b 4 -e 1M -f 16 -d bf16 -o avg" \
        "allgather -b 4 -e 1M -f 16" "alltoall -b 4 -e 1M -f 16" "reduce_scatter -b 4 -e 1M -f 16" \
        "bcast -b 4 -e 1M -f 16" "reduce -b 4 -e 1M -f 16 -d fp64" "barrier"; do
        # shellcheck disable=SC2086
        bench_ok "2 hosts x 2 ranks, tutti-bench -c $a" 2 -- "$bench" $a -i 3 -x 1
    done
    # the hierarchical algorithms against the flat ones; a small window: many segments
    if launch env -- env TUTTI_SHM_WINDOW=262144 "$check" && ! grep -q "^not ok" "$tmp/out" &&
        [ "$(grep -c '^ok' "$tmp/out")" -ge 40 ]; then
        ok "2 x 2: multinode_check ($(grep -c '^ok' "$tmp/out") cases: hier against flat)"
    else
        notok "2 x 2: multinode_check" "$tmp/out"
    fi
    if launch env -- env CCL_WORKER_COUNT=2 TUTTI_SHM_WINDOW=1048576 "$check" && ! grep -q "^not ok" "$tmp/out"; then
        ok "2 x 2 with 2 workers (sliced calls, a window per slice): multinode_check"
    else
        notok "2 x 2 with 2 workers: multinode_check" "$tmp/out"
    fi
    # 3 ranks: 2 on one host, 1 on the other (the rail algorithms are not offered)
    if launch env --np 3 -- "$check" && ! grep -q "^not ok" "$tmp/out" && grep -q "2 nodes, 1..2 ranks" "$tmp/out"; then
        ok "3 ranks on 2 hosts (2 + 1): multinode_check"
    else
        notok "3 ranks on 2 hosts: multinode_check" "$tmp/out"
    fi
    # a rank dies in the middle of hierarchical allreduces: the others fail, naming it
    launch env -- "$check" --die 3
    local rc=$?
    if [ $rc = 3 ] && [ "$(grep -c 'failed as it should' "$tmp/out")" = 3 ]; then
        ok "a rank that dies mid-run: the 3 others fail with an error, none hangs"
    else
        notok "a rank that dies mid-run (rc $rc)" "$tmp/out"
    fi
    # shared memory alone cannot span hosts: every rank refuses, saying why
    if ! launch env -- env TUTTI_TRANSPORT=shm "$bench" allreduce -b 4 -e 4 -i 1 -x 1 &&
        [ "$(grep -c 'span 2 nodes' "$tmp/out")" -ge 4 ]; then
        ok "TUTTI_TRANSPORT=shm across hosts is refused on every rank"
    else
        notok "TUTTI_TRANSPORT=shm across hosts is refused" "$tmp/out"
    fi
    # the hierarchical algorithms named where they cannot run: refused at creation
    if ! launch env --np 3 -- env CCL_ALLGATHER=hier "$bench" allgather -b 4 -e 4 -i 1 -x 1 &&
        grep -q "CCL_ALLGATHER: allgather algorithm \"hier\" needs" "$tmp/out"; then
        ok "CCL_ALLGATHER=hier on nodes of unequal size is refused, saying what it needs"
    else
        notok "CCL_ALLGATHER=hier on unequal nodes" "$tmp/out"
    fi

    up 3 --ranks-per-host 2
    if launch env --cyclic -- env TUTTI_SHM_WINDOW=262144 "$check" && ! grep -q "^not ok" "$tmp/out" &&
        grep -q "3 nodes, 2..2 ranks" "$tmp/out"; then
        ok "3 hosts x 2 ranks placed cyclically (rank r on host r mod 3): multinode_check"
    else
        notok "3 x 2 cyclic: multinode_check" "$tmp/out"
    fi
    bench_ok "3 x 2 cyclic: tutti-bench -c allreduce" 3 --cyclic -- "$bench" allreduce -b 4 -e 4M -f 64 -i 2 -x 1

    # a host whose only interface is loopback: 2 ranks there, all over ofi
    lo_ns="tmnlo$$"
    ip netns add "$lo_ns" && ip -n "$lo_ns" link set lo up
    local pids=() r
    for r in 0 1; do
        ip netns exec "$lo_ns" env RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 \
            TUTTI_TRANSPORT=ofi timeout -k 5 120 "$bench" allreduce -b 4 -e 1M -f 16 -i 3 -x 1 -c \
            >"$tmp/lo.$r" 2>&1 &
        pids+=($!)
    done
    rc=0
    for p in "${pids[@]}"; do wait "$p" || rc=1; done
    if [ $rc = 0 ] && grep -q "nodes 1 " "$tmp/lo.0"; then
        ok "a host with loopback only: 2 ranks over ofi"
    else
        cat "$tmp"/lo.* >"$tmp/out"
        notok "a host with loopback only" "$tmp/out"
    fi
}

part_ifaces() {
    up 2 --ranks-per-host 2 --decoy
    local a="allreduce -b 4 -e 1M -f 64 -i 2 -x 1"
    # shellcheck disable=SC2086
    if launch env -- env CCL_LOG_LEVEL=info "$bench" $a -c && grep -q "nodes 2 " "$tmp/out" &&
        [ "$(grep -c 'ofi: provider .*interface/domain eth0' "$tmp/out")" = 4 ] &&
        [ "$(grep -c 'interface eth0 (10.77.0.[12], the one that reaches MASTER_ADDR)' "$tmp/out")" = 4 ]; then
        ok "a second interface that reaches nothing (listed first by libfabric): nothing to set, eth0 chosen"
    else
        notok "a second interface that reaches nothing" "$tmp/out"
    fi
    local spec
    for spec in eth "=eth0" "^dcy" "^=dcy0,lo"; do
        # shellcheck disable=SC2086
        if launch env -- env TUTTI_SOCKET_IFNAME="$spec" CCL_LOG_LEVEL=info "$bench" $a -c &&
            [ "$(grep -c 'interface eth0 (10.77.0.[12], TUTTI_SOCKET_IFNAME)' "$tmp/out")" = 4 ] &&
            [ "$(grep -c 'ofi: provider .*interface/domain eth0' "$tmp/out")" = 4 ]; then
            ok "TUTTI_SOCKET_IFNAME=$spec: eth0 for the store, the liveness mesh and ofi"
        else
            notok "TUTTI_SOCKET_IFNAME=$spec" "$tmp/out"
        fi
    done
    # shellcheck disable=SC2086
    if ! launch env -- env TUTTI_SOCKET_IFNAME=nosuch "$bench" $a &&
        [ "$(grep 'TUTTI_SOCKET_IFNAME=nosuch matches no interface' "$tmp/out" | grep 'dcy0 10.78' | grep -c 'eth0 10.77')" = 4 ]; then
        ok "TUTTI_SOCKET_IFNAME naming no interface: every rank fails at once, listing the interfaces"
    else
        notok "TUTTI_SOCKET_IFNAME=nosuch" "$tmp/out"
    fi
    # shellcheck disable=SC2086
    if ! launch env -- env TUTTI_SOCKET_IFNAME=dcy0 TUTTI_TIMEOUT=5 "$bench" $a &&
        grep -q "does interface dcy0 (10.78.2.1), which TUTTI_SOCKET_IFNAME=dcy0 chose, reach MASTER_ADDR" "$tmp/out" &&
        [ "$(grep -c 'init_env failed' "$tmp/out")" = 4 ]; then
        ok "TUTTI_SOCKET_IFNAME naming an interface that reaches nothing: every rank fails within its timeout, saying which"
    else
        notok "TUTTI_SOCKET_IFNAME=dcy0" "$tmp/out"
    fi
    # shellcheck disable=SC2086
    if launch env -- env FI_PROVIDER=tcp CCL_LOG_LEVEL=info "$bench" $a -c &&
        [ "$(grep -c 'ofi: provider tcp;ofi_rxm (FI_PROVIDER tcp)' "$tmp/out")" = 4 ]; then
        ok "FI_PROVIDER=tcp is honoured and logged"
    else
        notok "FI_PROVIDER=tcp" "$tmp/out"
    fi
    # shellcheck disable=SC2086
    if ! launch env -- env FI_PROVIDER=nosuch "$bench" $a &&
        [ "$(grep -c 'FI_PROVIDER=nosuch' "$tmp/out")" = 4 ]; then
        ok "FI_PROVIDER naming no provider: every rank fails, naming it"
    else
        notok "FI_PROVIDER=nosuch" "$tmp/out"
    fi
    # TUTTI_SOCKET_IFNAME on rank 0 only: rank 0 publishes the decoy's address, which the other
    # host cannot reach. Those ranks fail at once saying so; the ranks waiting for them learn it,
    # with the first one's error, from the store ("rank 2's creation failed: ... is
    # TUTTI_SOCKET_IFNAME the same on every rank?") instead of waiting for the timeout.
    # shellcheck disable=SC2016,SC2086
    if ! launch env -- env TUTTI_TIMEOUT=60 bash -c \
        '[ "$RANK" = 0 ] && export TUTTI_SOCKET_IFNAME=dcy0; exec "$0" "$@"' "$bench" $a &&
        [ "$(grep -c 'init_env failed' "$tmp/out")" = 4 ] &&
        [ "$(grep -c 'init_env failed.*is TUTTI_SOCKET_IFNAME the same on every rank' "$tmp/out")" = 4 ] &&
        [ "$(grep -c "rank [0-9]*'s creation failed: " "$tmp/out")" -ge 1 ] &&
        ! grep -q 'timed out' "$tmp/out"; then
        ok "TUTTI_SOCKET_IFNAME on one rank only: every rank fails, the waiting ones told by the store"
    else
        notok "TUTTI_SOCKET_IFNAME on rank 0 only" "$tmp/out"
    fi
    # shellcheck disable=SC2086
    if ! launch env -- env FI_PROVIDER=shm TUTTI_TIMEOUT=20 "$bench" $a &&
        [ "$(grep -c 'FI_PROVIDER=shm is a shared-memory provider' "$tmp/out")" = 4 ]; then
        ok "FI_PROVIDER=shm across hosts: every rank refuses it at creation, saying why"
    else
        notok "FI_PROVIDER=shm" "$tmp/out"
    fi
}

part_launchers() {
    up 2 --ranks-per-host 2 --rate 10gbit
    local a="allreduce -b 4 -e 4M -f 32 -i 2 -x 1 -c" k
    for k in mpich openmpi; do
        # shellcheck disable=SC2086
        if launch "$k" -- "$bench" $a && grep -q "ranks 4  nodes 2 " "$tmp/out" &&
            grep -q "algorithm auto (hier at -b, hier at -e)" "$tmp/out"; then
            ok "$k's mpirun through the ssh stand-in: 4 ranks on 2 hosts find their nodes, hier chosen"
        else
            notok "$k's mpirun across hosts" "$tmp/out"
        fi
    done
    # shellcheck disable=SC2086
    bench_ok "RANK/WORLD_SIZE with MASTER_ADDR on host 0, block placement" 2 -- "$bench" allgather -b 4 -e 1M -f 32 -i 2 -x 1
    # shellcheck disable=SC2086
    bench_ok "RANK/WORLD_SIZE, cyclic placement (ranks of a host not consecutive)" 2 --cyclic -- "$bench" alltoall -b 4 -e 1M -f 32 -i 2 -x 1
    # shellcheck disable=SC2086
    if launch mpich --launcher-arg -bind-to --launcher-arg core -- "$bench" $a && grep -q "nodes 2 " "$tmp/out"; then
        ok "mpich with -bind-to core across hosts"
    else
        notok "mpich -bind-to core across hosts" "$tmp/out"
    fi
    # No MASTER_PORT: every rank, on either host, derives the same port of the job's own from
    # the mpiexec address that Hydra gives each host's proxy.
    local ports
    # shellcheck disable=SC2086
    if timeout -k 5 180 bash "$cluster" _on_host --name "$name" 0 mpiexec.mpich -launcher ssh \
        -launcher-exec "${TUTTI_CLUSTER_STATE:-/run/tutti-cluster}/$name/ssh" \
        -hosts 10.77.0.1:2,10.77.0.2:2 -n 4 -genv MASTER_ADDR 10.77.0.1 -genv CCL_LOG_LEVEL info \
        "$bench" $a >"$tmp/out" 2>&1 && grep -q "ranks 4  nodes 2 " "$tmp/out" &&
        ports=$(sed -n "s/.*the store takes port \([0-9]*\), the job's own (from the address of Hydra's mpiexec.*/\1/p" "$tmp/out") &&
        [ "$(echo "$ports" | wc -l)" = 4 ] && [ "$(echo "$ports" | sort -u | wc -l)" = 1 ]; then
        ok "mpich across hosts without MASTER_PORT: all 4 ranks meet on mpiexec's port $(echo "$ports" | head -1)"
    else
        notok "mpich across hosts without MASTER_PORT" "$tmp/out"
    fi
}

part_train() {
    up 2 --ranks-per-host 2 --rate 10gbit
    local train="$build/examples/train_bf16" targs="--steps 24 --batch 64 --hidden 128 --param-hash" k
    for k in env mpich; do
        # shellcheck disable=SC2086
        if launch "$k" -- "$train" $targs; then
            local hashes
            hashes=$(sed -n 's/^param_hash: rank [0-9]* //p' "$tmp/out" | sort -u)
            if [ "$(grep -c '^param_hash: rank' "$tmp/out")" = 4 ] && [ "$(echo "$hashes" | wc -l)" = 1 ]; then
                ok "train_bf16 under $k on 2 hosts x 2 ranks: bit-identical weights on all 4 ranks ($hashes)"
                continue
            fi
        fi
        notok "train_bf16 under $k across hosts" "$tmp/out"
    done
    if [ ! -d "$build/python/tutti_torch" ] || [ ! -x "$root/.venv/bin/torchrun" ]; then
        echo "ok $((n + 1)) - torch_ddp.py under torchrun # SKIP no tutti_torch in this build"
        n=$((n + 1))
        return
    fi
    if PYTHONPATH="$build/python" OMP_NUM_THREADS=1 \
        launch torchrun -- "$root/examples/torch_ddp.py" --steps 12 --dtype bf16 --hidden 64 &&
        grep -q "torch_ddp.py: 4 ranks, backend tutti" "$tmp/out" &&
        grep -q "replicas identical: yes" "$tmp/out"; then
        ok "torch_ddp.py (DDP, bf16) under torchrun on 2 hosts x 2 ranks: replicas identical bit for bit"
    else
        notok "torch_ddp.py under torchrun across hosts" "$tmp/out"
    fi
}

# fault_trial DESC FAMILY COUNT KIND VICTIM DELAY [UNRESPONSIVE]: one run of multinode_faults on
# the cluster (2 hosts x 2 ranks) with KIND (kill, stop, cut) injected DELAY seconds after every
# rank is ready; VICTIM: the rank killed or stopped, or the host whose link is cut;
# TUTTI_UNRESPONSIVE 2 s unless given.
fault_trial() {
    local desc=$1 fam=$2 count=$3 kind=$4 victim=$5 delay=$6 unresp=${7:-2}
    local d="$tmp/trial$n" cause victims want=4 i pid="" lp rc
    rm -rf "$d" && mkdir -p "$d"
    case $kind in
    kill) cause=died victims=$victim want=3 ;;
    stop) cause=unresponsive victims=$victim ;;
    cut) cause=unreachable victims="0,1|2,3" ;;
    esac
    launch env -- env TUTTI_TIMEOUT=20 TUTTI_UNRESPONSIVE="$unresp" \
        "$faults" "$fam" "$count" "$d" "$cause" "$victims" &
    lp=$!
    for ((i = 0; i < 600; i++)); do # up to 30 s for the job to be set up
        [ "$(ls "$d" | grep -c '^ready\.')" = 4 ] && break
        sleep 0.05
    done
    sleep "$delay"
    date +%s.%N >"$d/fault_at.tmp" && mv "$d/fault_at.tmp" "$d/fault_at"
    case $kind in
    kill) pid=$(cat "$d/pid.$victim" 2>/dev/null) && kill -KILL "$pid" ;;
    stop)
        pid=$(cat "$d/pid.$victim" 2>/dev/null) && kill -STOP "$pid"
        for ((i = 0; i < 400; i++)); do # the others' errors first (20 s at most)
            [ "$(ls "$d" | grep -c '^done\.')" -ge 3 ] && break
            sleep 0.05
        done
        sleep 0.3
        [ -z "$pid" ] || kill -CONT "$pid"
        ;;
    cut) ip link set "tcv$name$victim" down ;;
    esac
    wait "$lp"
    rc=$?
    [ "$kind" != cut ] || ip link set "tcv$name$victim" up
    local left
    left=$(ls -A "$state_dir"/shm-h* 2>/dev/null | grep -v ':$' | grep -v '^$')
    if [ -n "$pid" ] || [ "$kind" = cut ]; then :; else
        notok "$desc: no pid to signal" "$tmp/out"
        return
    fi
    if [ "$(grep -c '^verdict ok' "$tmp/out")" = $want ] && ! grep -q '^verdict bad' "$tmp/out" &&
        [ -z "$left" ] && { [ "$kind" = kill ] || [ $rc = 0 ]; }; then
        ok "$desc: $(grep '^verdict ok' "$tmp/out" | grep -v 'the victim' | sed 's/.* \([0-9.]*\) s after the fault.*/\1/' | sort -n | tail -1) s at most"
    else
        echo "left in the hosts' /dev/shm: ${left:-nothing}; exit status $rc" >>"$tmp/out"
        notok "$desc" "$tmp/out"
    fi
}

part_faults() {
    local seed=${TUTTI_FAULT_SEED:-$(date +%s)} fams=(allreduce allgather alltoall reduce_scatter bcast reduce barrier)
    local counts=(3 4096 65536) i kind fam count victim delay
    echo "# seed $seed (TUTTI_FAULT_SEED=$seed repeats these trials)"
    RANDOM=$seed
    up 2 --ranks-per-host 2
    state_dir="${TUTTI_CLUSTER_STATE:-/run/tutti-cluster}/$name"
    if [ -n "${TUTTI_FAULT_TRIAL:-}" ]; then # KIND,FAMILY,COUNT,VICTIM,DELAY[,UNRESPONSIVE]
        local unresp
        IFS=, read -r kind fam count victim delay unresp <<<"$TUTTI_FAULT_TRIAL"
        for ((i = 0; i < ${TUTTI_FAULT_REPEAT:-1}; i++)); do
            fault_trial "$kind rank $victim of $fam ($count fp32) after ${delay}s, try $((i + 1))" \
                "$fam" "$count" "$kind" "$victim" "$delay" "${unresp:-2}"
        done
        return
    fi
    for ((i = 0; i < ${#fams[@]}; i++)); do
        fam=${fams[$i]}
        kind=$(((seed + i) % 2)) && kind=$([ $kind = 0 ] && echo kill || echo stop)
        count=${counts[$((RANDOM % 3))]}
        victim=$((RANDOM % 4))
        delay=0.$((RANDOM % 4))$((RANDOM % 10))
        fault_trial "seed $seed: SIGKILL/SIGSTOP across hosts: $kind rank $victim of $fam ($count fp32) after ${delay}s" \
            "$fam" "$count" "$kind" "$victim" "$delay"
    done
    fam=${fams[$((RANDOM % 7))]}
    count=${counts[$((RANDOM % 3))]}
    delay=0.$((RANDOM % 4))$((RANDOM % 10))
    # The link cut (TUTTI_TEST_LINK_CUT=0 skips it). It used to crash a rank inside libfabric
    # 1.17's fi_close of an rxm endpoint that still held cancelled pieces after the cut (3 of 8
    # tries of an alltoall); such an endpoint is now given up and left open, not closed.
    if [ "${TUTTI_TEST_LINK_CUT:-1}" = 1 ]; then
        fault_trial "seed $seed: link of host 1 cut during $fam ($count fp32) after ${delay}s" \
            "$fam" "$count" cut 1 "$delay"
    fi
    # The end of a communicator right after an eager send across a link that is down: the
    # sender waits for the silent peer (it used to end after its 1 s timeout, and the message,
    # still on its way, was lost) and the receiver for the data after the sender's goodbye.
    local d="$tmp/lastsend" lp
    rm -rf "$d" && mkdir -p "$d"
    launch env -- env TUTTI_TIMEOUT=60 "$faults" lastsend "$d" &
    lp=$!
    for ((i = 0; i < 600; i++)); do
        [ "$(ls "$d" | grep -c '^ready\.')" = 4 ] && break
        sleep 0.05
    done
    ip link set "tcv${name}1" down
    touch "$d/go"
    sleep 5
    ip link set "tcv${name}1" up
    wait "$lp"
    rc=$?
    if [ $rc = 0 ] && [ "$(grep -c '^verdict ok' "$tmp/out")" = 2 ]; then
        ok "an eager send, then the end, while the link is down for 5 s: the message arrives"
    else
        echo "exit status $rc" >>"$tmp/out"
        notok "an eager send, then the end, while the link is down for 5 s" "$tmp/out"
    fi
    # A full /dev/shm (a 64 KiB tmpfs over it, filled, in a mount namespace of its own; two
    # ranks on this machine): the shared segment is a memfd, which needs no room there.
    if unshare -m true 2>/dev/null; then
        if unshare -m bash -c 'mount -t tmpfs -o size=64k tmpfs /dev/shm &&
                ! dd if=/dev/zero of=/dev/shm/fill bs=4k count=32 2>/dev/null &&
                export MASTER_ADDR=127.0.0.1 MASTER_PORT=$((20000 + $$ % 20000)) WORLD_SIZE=2 &&
                { RANK=1 LOCAL_RANK=1 timeout 60 "$1" allreduce -b 16 -e 1M -f 16 -c -i 2 -x 1 &
                  RANK=0 LOCAL_RANK=0 timeout 60 "$1" allreduce -b 16 -e 1M -f 16 -c -i 2 -x 1; } &&
                wait $!' _ "$bench" >"$tmp/out" 2>&1 && grep -q "^ *1048576 " "$tmp/out"; then
            ok "a full /dev/shm: the job works (its segment is a memfd)"
        else
            notok "a full /dev/shm" "$tmp/out"
        fi
    fi
    # Packet loss: 1% of what each host sends dropped (netem, or nftables where the kernel has
    # no netem): the job is slower (TCP retransmits) and every result exact.
    if up 2 --ranks-per-host 2 --loss 1% --if-possible && grep -q "loss 1%" "$tmp/up"; then
        local c ok_all=1
        for c in allreduce alltoall; do
            launch env -- env TUTTI_TIMEOUT=60 "$bench" "$c" -b 16 -e 1M -f 16 -c -i 5 -x 1 &&
                grep -q "nodes 2 " "$tmp/out" && grep -q "^ *1048576 " "$tmp/out" || ok_all=0
            [ $ok_all = 1 ] || break
        done
        if [ $ok_all = 1 ]; then
            ok "1% packet loss on every host's link: allreduce and alltoall on 2 x 2 ranks exact"
        else
            notok "1% packet loss" "$tmp/out"
        fi
        # Loss and a fault at once: retransmissions must not hide the death or the stop, nor
        # be taken for one (the survivors name the victim, the results before it are exact).
        for kind in kill stop; do
            fam=${fams[$((RANDOM % 7))]}
            count=${counts[$((RANDOM % 3))]}
            victim=$((RANDOM % 4))
            delay=0.$((RANDOM % 4))$((RANDOM % 10))
            fault_trial "seed $seed: 1% loss and $kind of rank $victim during $fam ($count fp32) after ${delay}s" \
                "$fam" "$count" "$kind" "$victim" "$delay"
        done
        up 2 --ranks-per-host 2
    else
        echo "ok $((n + 1)) - 1% packet loss # SKIP neither netem nor nftables here: $(tail -1 "$tmp/up")"
        n=$((n + 1))
        up 2 --ranks-per-host 2
    fi
    # rank 1 under a low limit of open files: creation fails on every rank at once, naming the
    # limit (node discovery, the liveness mesh with room for ofi's connections, the ofi
    # endpoint), or the job works; every limit from 4 to 24, then 32 and 64
    local lim t0 t1 good
    for lim in $(seq 4 24) 32 64; do
        t0=$(date +%s)
        launch env -- bash -c 'if [ "$RANK" = 1 ]; then exec prlimit --nofile='$lim:$lim' "$@"; else exec "$@"; fi' \
            _ env TUTTI_TIMEOUT=60 "$bench" allreduce -b 4 -e 64K -f 64 -i 2 -x 1 -c
        rc=$?
        t1=$(date +%s)
        good=0
        if [ $rc = 0 ] && grep -q "nodes 2 " "$tmp/out"; then
            good=1
        elif [ $rc != 0 ] && [ $((t1 - t0)) -lt 20 ] && # "at once": not the 60 s timeout
            [ "$(grep -c 'init_env failed.*RLIMIT_NOFILE, ulimit -n) .*raise it' "$tmp/out")" = 4 ] &&
            [ "$(grep -c 'init_env failed.*rank 1 .*RLIMIT_NOFILE' "$tmp/out")" -ge 3 ]; then
            good=2
        fi
        left=$(ls -A "$state_dir"/shm-h* 2>/dev/null | grep -v ':$' | grep -v '^$')
        if [ $good != 0 ] && [ -z "$left" ]; then
            ok "rank 1 with RLIMIT_NOFILE $lim: $([ $good = 1 ] && echo "the job works" || echo "every rank fails within $((t1 - t0)) s naming the limit")"
        else
            echo "exit status $rc after $((t1 - t0)) s; left in /dev/shm: ${left:-nothing}" >>"$tmp/out"
            notok "rank 1 with RLIMIT_NOFILE $lim" "$tmp/out"
        fi
    done
}

# shrink_trial DESC VICTIM [SECOND DELAY]: one run of multinode_shrink on the cluster (2 hosts x
# 2 ranks): VICTIM SIGKILLed 0.2 s after every rank is ready; SECOND, if given, SIGKILLs itself
# DELAY s after its own allreduce failed (during the shrink). Passes when every other rank
# prints "verdict ok" (or, with a second death, at most one "verdict out"), none "verdict bad",
# and the hosts' /dev/shm are empty.
shrink_trial() {
    local desc=$1 victim=$2 second=${3:-} delay=${4:-}
    local d="$tmp/shrink$n" i pid="" lp rc r want=() missing="" t0 t1
    rm -rf "$d" && mkdir -p "$d"
    for r in 0 1 2 3; do
        [ "$r" = "$victim" ] || [ "$r" = "$second" ] || want+=("$r")
    done
    t0=$(date +%s.%N)
    # shellcheck disable=SC2086
    launch env --timeout 90 -- env TUTTI_TIMEOUT=20 "$shrink" "$d" "$victim" $second $delay &
    lp=$!
    for ((i = 0; i < 600; i++)); do # up to 30 s for the job to be set up
        [ "$(ls "$d" | grep -c '^ready\.')" = 4 ] && break
        sleep 0.05
    done
    sleep 0.2
    date +%s.%N >"$d/fault_at.tmp" && mv "$d/fault_at.tmp" "$d/fault_at"
    pid=$(cat "$d/pid.$victim" 2>/dev/null) && kill -KILL "$pid"
    wait "$lp"
    rc=$?
    t1=$(date +%s.%N)
    local left
    left=$(ls -A "$state_dir"/shm-h* 2>/dev/null | grep -v ':$' | grep -v '^$')
    if [ -z "$pid" ]; then
        notok "$desc: no pid to signal" "$tmp/out"
        return
    fi
    # At most one survivor may be out (docs/shrink.md: a death at the very end of a creation),
    # and only when a second rank dies during the shrink; the others then shrink without it.
    local nout
    nout=$(grep -c '^verdict out' "$tmp/out")
    [ -n "$second" ] || [ "$nout" = 0 ] || missing+=" (a rank out without a second death)"
    [ "$nout" -le 1 ] || missing+=" (more than one rank out)"
    for r in "${want[@]}"; do
        grep -q "^verdict out rank $r:" "$tmp/out" && continue
        grep -q "^verdict ok rank $r: shrunk to $((${#want[@]} - nout)) ranks" "$tmp/out" ||
            missing+=" $r"
    done
    if [ -z "$missing" ] && [ "$(grep -c '^verdict ok' "$tmp/out")" = $((${#want[@]} - nout)) ] &&
        ! grep -q '^verdict bad' "$tmp/out" && [ -z "$left" ]; then
        local most job
        most=$(grep '^verdict ok' "$tmp/out" | sed 's/.* in \([0-9.]*\) s (.*/\1/' | sort -n | tail -1)
        job=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')
        ok "$desc: ranks ${want[*]} left, shrunk in $most s at most ($job s for the job)"
    else
        echo "no verdict ok from rank(s):${missing:- none}; left in the hosts' /dev/shm: ${left:-nothing}; exit status $rc" >>"$tmp/out"
        notok "$desc" "$tmp/out"
    fi
}

part_shrink() {
    up 2 --ranks-per-host 2
    state_dir="${TUTTI_CLUSTER_STATE:-/run/tutti-cluster}/$name"
    local i k=${TUTTI_SHRINK_REPEAT:-1}
    for ((i = 1; i <= k; i++)); do
        shrink_trial "kill rank 0 (the store's owner) in allreduces, survivors shrink (try $i)" 0
        shrink_trial "kill rank 3 (the other host) in allreduces, survivors shrink (try $i)" 3
        shrink_trial "kill rank 1, then rank 2 (the other host) 0.05 s into the shrink (try $i)" 1 2 0.05
        shrink_trial "kill rank 2, then rank 0 (the shrink's coordinator) 0.05 s into it (try $i)" 2 0 0.05
        # rank 2 dies after its shrink returned: the new communicator fails, shrunk again
        shrink_trial "kill rank 1, then rank 2 1 s later, in the shrunk communicator (try $i)" 1 2 1.0
    done
}

case $part in
hier) part_hier ;;
ifaces) part_ifaces ;;
launchers) part_launchers ;;
train) part_train ;;
faults) part_faults ;;
shrink) part_shrink ;;
*) echo "multinode.sh: unknown part $part" >&2; exit 2 ;;
esac
echo "1..$n"
exit $fail
