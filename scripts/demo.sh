#!/usr/bin/env bash
# demo.sh: builds tutti (installing missing packages first), then runs the bf16 data-parallel
# training example on 2 ranks with MPICH's launcher (the main job), then a short allreduce
# comparison with MPICH and Open MPI, and tutti's bf16 benchmark under Open MPI's launcher.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

bash scripts/build.sh
export PATH="$PWD/.venv/bin:$PATH" # the venv's meson configured build/; its Python has torch

# Open MPI's mpirun refuses to start, even on one node, when it finds neither ssh nor rsh (as in
# a bare container); its "isolated" launcher starts local ranks without them.
if ! command -v ssh >/dev/null 2>&1 && ! command -v rsh >/dev/null 2>&1; then
    export OMPI_MCA_plm=isolated
fi

train=build/examples/train_bf16
bench=build/bench/tutti-bench
export MASTER_ADDR=127.0.0.1

# free_port prints a TCP port nobody listens on, for rank 0's rendezvous store; a fresh one per
# run, so that a previous run's sockets in TIME_WAIT cannot get in the way.
free_port() {
    local p
    for _ in $(seq 100); do
        p=$((20000 + RANDOM % 12000))
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

# The main job: an MLP classifier (32-512-512-10) trained in bf16 on 2 ranks, gradients averaged
# by asynchronous bf16 allreduce in buckets while backward runs; a line per epoch, then the
# final line. `train_bf16 --help` explains every flag and the final line's fields.
MASTER_PORT=$(free_port)
run mpirun.mpich -n 2 "$train" --steps 256 --batch 256 --hidden 512 --seed 1 --param-hash

# Then a short allreduce comparison: tutti, MPICH and Open MPI side by side at 2 ranks, fp32,
# 8 B to 2 MiB, the libraries alternated, medians and ratios (above 1: tutti is faster). The
# full comparison, Gloo and the plot included, is bench/compare (docs/performance.md, "Comparing").
echo
echo "+ bench/compare allreduce -n 2 -b 8 -e 2M -f 8 -r 2 --only tutti,mpich,openmpi"
timeout -k 5 300 bench/compare allreduce -n 2 -b 8 -e 2M -f 8 -r 2 --only tutti,mpich,openmpi \
    -o build/demo-compare.png

# And tutti's benchmark under Open MPI's launcher, bf16, every result checked. Open MPI passes
# only the variables named with -x; it needs leave to run as root and to place more ranks than
# it counts cores.
MASTER_PORT=$(free_port)
run mpirun.openmpi --allow-run-as-root --oversubscribe -n 2 -x MASTER_ADDR -x MASTER_PORT \
    "$bench" allreduce -b 8 -e 1M -f 8 -i 100 -d bf16 -c

echo
echo "demo.sh: done"
