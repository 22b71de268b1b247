#!/usr/bin/env bash
# demo.sh: builds tutti (installing missing packages first), then runs the allreduce benchmark on
# 2 ranks with MPICH's launcher in fp32 and bf16, and once with Open MPI's launcher.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/build.sh

# Open MPI's mpirun refuses to start, even on one node, when it finds neither ssh nor rsh (as in
# a bare container); its "isolated" launcher starts local ranks without them.
if ! command -v ssh >/dev/null 2>&1 && ! command -v rsh >/dev/null 2>&1; then
    export OMPI_MCA_plm=isolated
fi

bench=build/bench/tutti-bench
export MASTER_ADDR=127.0.0.1

# free_port prints a TCP port nobody listens on, for rank 0's rendezvous store; a fresh one per
# run, so that a previous run's sockets in TIME_WAIT cannot get in the way.
free_port() {
    local p
    for _ in $(seq 100); do
        p=$((20000 + RANDOM % 30000))
        if [ -z "$(ss -Htln "sport = :$p" 2>/dev/null)" ]; then
            echo "$p"
            return
        fi
    done
    echo 29500
}

run() {
    echo
    echo "+ MASTER_PORT=$MASTER_PORT $*"
    timeout -k 5 120 "$@"
}

export MASTER_PORT
MASTER_PORT=$(free_port)
run mpirun.mpich -n 2 "$bench" allreduce -b 8 -e 4M -i 200 -d fp32
MASTER_PORT=$(free_port)
run mpirun.mpich -n 2 "$bench" allreduce -b 8 -e 4M -i 200 -d bf16

# Open MPI passes only the variables named with -x; it needs leave to run as root and to place
# more ranks than it counts cores.
MASTER_PORT=$(free_port)
run mpirun.openmpi --allow-run-as-root --oversubscribe -n 2 -x MASTER_ADDR -x MASTER_PORT \
    "$bench" allreduce -b 8 -e 1M -i 100 -d bf16 -c

echo
echo "demo.sh: done"
