#!/usr/bin/env bash
# slurm.sh: tutti under a real single-node Slurm: a slurmctld and a slurmd of the test's own on
# this machine (private configuration, ports, state, spool and logs under a temporary directory;
# any other Slurm here, on the default ports or not, is neither used nor touched), taken down at
# the end whatever happens; TAP output. Behaviour only, no timing thresholds; every launch is
# under timeout (60 s, 90 s for the PyTorch ones). About 15 s here (25 s with the PyTorch cases).
#
#   slurm.sh ROOT BUILD_DIR     ROOT: the repository; BUILD_DIR: a meson build with
#                               bench/tutti-bench and, when it has the PyTorch backend,
#                               python/tutti_torch (run with ROOT/.venv/bin/python)
#
# Cases (2 and 6 are two TAP lines each):
#   1  srun -n 2 tutti-bench allreduce -c: exit 0, both ranks found by
#      SLURM_PROCID/SLURM_STEP_NUM_TASKS ("rank 0 of 2", "rank 1 of 2" in the info log)
#   2  the same with --cpu-bind=cores (each rank: 2 ranks on the node, 1 core it may use, not
#      oversubscribed) and with --cpu-bind=none (exit 0)
#   3  the store's port is the step's own: 20000 + 10 * (SLURM_JOB_ID % 1000) +
#      SLURM_STEP_ID % 10, checked on the second step of an salloc allocation
#   4  two 2-rank steps of one allocation at the same moment (srun --overlap), no MASTER_PORT:
#      both work, on different ports
#   5  sbatch -n 2 running tutti-bench without srun: one rank, and a warning that says srun
#   6  with tutti_torch: examples/torch_ddp.py under srun -n 2 (replicas identical), and
#      init_process_group("tutti") + all_reduce (sum = world size, LOCAL_RANK = SLURM_LOCALID);
#      skipped without tutti_torch in BUILD_DIR
#   7  srun -n 2 --kill-on-bad-exit=0 with rank 1 SIGKILLed mid-run: rank 0 fails (nonzero
#      exit, before the timeout) with an error naming rank 1
#
# Exits 0 when all pass, 1 on a failure, 77 (skip) without root, without slurmctld, slurmd,
# srun, sbatch, salloc or munge, or when the private Slurm does not come up within 40 s (its
# logs' tails are printed then). munge: a munged that answers on the default socket is used;
# else the test starts its own (as user munge, on a socket in its directory) and stops it.
# TUTTI_SLURM_OWN_MUNGE=1 starts its own even when one answers.
set -uo pipefail
usage="usage: slurm.sh ROOT BUILD_DIR"
root=${1:?$usage}
build=${2:?$usage}
root=$(cd "$root" && pwd) || exit 1
build=$(cd "$build" && pwd) || exit 1
bench=$build/bench/tutti-bench

skip() {
    echo "1..0 # SKIP $*"
    exit 77
}
[ "$(id -u)" = 0 ] || skip "needs root (to run slurmd)"
for c in slurmctld slurmd srun sbatch salloc sinfo squeue scancel munge unmunge; do
    command -v "$c" >/dev/null || skip "no $c here (Debian: apt-get install slurm-wlm munge)"
done
if [ ! -x "$bench" ]; then
    echo "Bail out! no $bench: build first"
    exit 1
fi

# Nothing of an outer launcher or job may leak into the tasks (this may itself run in a job).
while read -r v; do unset "$v"; done < <(compgen -e | grep -E '^(SLURM|SBATCH|SALLOC|SRUN|PMI|PMIX|OMPI|MV2)_')
unset RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE GROUP_RANK TORCHELASTIC_RUN_ID \
    TORCHELASTIC_USE_AGENT_STORE MASTER_ADDR MASTER_PORT TUTTI_STORE_PORT TUTTI_JOB_TOKEN \
    CCL_LOG_LEVEL

tmp=$(mktemp -d "${TMPDIR:-/tmp}/tutti-slurm.XXXXXX") || exit 1
chmod 711 "$tmp" # a munged of the test's own, as user munge, reaches its socket directory
ctld_pid=""
slurmd_pid=""
munged_pid=""
conf=$tmp/slurm.conf

# shellcheck disable=SC2317 # stop and cleanup run from the EXIT trap
# stop PID: SIGTERM, up to 15 s, then SIGKILL (only a process this script started).
stop() {
    local pid=$1 i
    kill "$pid" 2>/dev/null || return 0
    for ((i = 0; i < 150; i++)); do
        kill -0 "$pid" 2>/dev/null || break
        sleep 0.1
    done
    ! kill -0 "$pid" 2>/dev/null || kill -9 "$pid"
    wait "$pid" 2>/dev/null
}
# shellcheck disable=SC2317
cleanup() {
    local i jobs kids=""
    if [ -n "$ctld_pid" ] && kill -0 "$ctld_pid" 2>/dev/null; then
        jobs=$(timeout 10 squeue -h -o %A 2>/dev/null)
        if [ -n "$jobs" ]; then
            # shellcheck disable=SC2086 # one job id a word
            timeout 10 scancel $jobs 2>/dev/null
            for ((i = 0; i < 100; i++)); do
                [ -z "$(timeout 5 squeue -h -o %A 2>/dev/null)" ] && break
                sleep 0.1
            done
        fi
        kids=$(pgrep -P "$ctld_pid") # slurmscriptd
    fi
    [ -z "$slurmd_pid" ] || stop "$slurmd_pid"
    [ -z "$ctld_pid" ] || stop "$ctld_pid"
    for i in $kids; do # slurmctld stops it; if not, and it is still that process
        grep -q slurmscriptd "/proc/$i/cmdline" 2>/dev/null && kill -9 "$i"
    done
    [ -z "$munged_pid" ] || stop "$munged_pid"
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
export SLURM_CONF=$conf

# munge
authinfo=""
if [ "${TUTTI_SLURM_OWN_MUNGE:-0}" = 1 ] || ! munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then
    for c in munged setpriv; do
        command -v "$c" >/dev/null || skip "no munged answers and there is no $c to start one"
    done
    [ -e /etc/munge/munge.key ] || skip "no munged answers and there is no /etc/munge/munge.key"
    mkdir -p "$tmp/munge"
    if ! chown munge:munge "$tmp/munge" || ! chmod 755 "$tmp/munge"; then
        skip "no munged answers and there is no user munge to start one as"
    fi
    sock=$tmp/munge/munge.socket
    setpriv --reuid=munge --regid=munge --init-groups munged -F --socket="$sock" \
        --pid-file="$tmp/munge/munged.pid" --log-file="$tmp/munge/munged.log" \
        --seed-file="$tmp/munge/munged.seed" </dev/null >"$tmp/munged.out" 2>&1 &
    munged_pid=$!
    for ((i = 0; i < 100; i++)); do
        munge -S "$sock" -n 2>/dev/null | unmunge -S "$sock" >/dev/null 2>&1 && break
        kill -0 "$munged_pid" 2>/dev/null || break
        sleep 0.1
    done
    if ! munge -S "$sock" -n 2>/dev/null | unmunge -S "$sock" >/dev/null 2>&1; then
        tail -n 5 "$tmp/munged.out" "$tmp/munge/munged.log" 2>/dev/null | sed 's/^/# /'
        skip "munged did not come up"
    fi
    authinfo="AuthInfo=socket=$sock"
fi

# Two free ports next to each other, below the ephemeral range and the ports tutti's Slurm
# stores use (20000-29999).
listening() {
    if command -v ss >/dev/null; then
        ss -Hltn 2>/dev/null | awk '{print $4}' | grep -qE "[:.]$1\$"
    else
        (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
    fi
}
port=""
for ((i = 0; i < 200; i++)); do
    p=$((16000 + (($$ + i * 7) % 1900) * 2))
    if ! listening "$p" && ! listening $((p + 1)); then
        port=$p
        break
    fi
done
[ -n "$port" ] || skip "no two free ports in 16000-19999"

# The node as slurmd sees it; job ids start at a random place, so the job's store port
# (below) varies from run to run.
node=$(slurmd -C 2>/dev/null | head -1)
name=$(sed -n 's/^NodeName=\([^ ]*\).*/\1/p' <<<"$node")
[ -n "$name" ] || skip "slurmd -C says nothing usable: $node"
hw=$(tr ' ' '\n' <<<"$node" | grep -E '^(CPUs|Boards|SocketsPerBoard|CoresPerSocket|ThreadsPerCore|RealMemory)=' | tr '\n' ' ')
mkdir -p "$tmp/state" "$tmp/spool"
cat >"$conf" <<CONF
ClusterName=tuttitest
SlurmctldHost=$name(127.0.0.1)
SlurmctldPort=$port
SlurmdPort=$((port + 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
$authinfo
StateSaveLocation=$tmp/state
SlurmdSpoolDir=$tmp/spool
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmdPidFile=$tmp/slurmd.pid
SlurmctldLogFile=$tmp/slurmctld.log
SlurmdLogFile=$tmp/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/affinity
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
MpiDefault=none
ReturnToService=2
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MailProg=/bin/true
FirstJobId=$((1000 + RANDOM % 50000))
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
KillWait=5
MinJobAge=30
NodeName=$name NodeAddr=127.0.0.1 $hw State=UNKNOWN
PartitionName=tutti Nodes=$name Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
CONF

slurmctld -D -f "$conf" </dev/null >"$tmp/slurmctld.out" 2>&1 &
ctld_pid=$!
slurmd -D -f "$conf" </dev/null >"$tmp/slurmd.out" 2>&1 &
slurmd_pid=$!
up=0
for ((i = 0; i < 80; i++)); do
    if timeout 5 sinfo -h -o %T 2>/dev/null | grep -qx idle; then
        up=1
        break
    fi
    if ! kill -0 "$ctld_pid" 2>/dev/null || ! kill -0 "$slurmd_pid" 2>/dev/null; then
        break
    fi
    sleep 0.5
done
if [ "$up" != 1 ]; then
    for d in slurmctld slurmd; do
        f=$d.log
        [ -s "$tmp/$f" ] || f=$d.out
        [ -s "$tmp/$f" ] && tail -n 8 "$tmp/$f" | sed "s|^|# $f: |"
    done
    why="its node not idle after 40 s"
    kill -0 "$slurmd_pid" 2>/dev/null || why="slurmd exited"
    kill -0 "$ctld_pid" 2>/dev/null || why="slurmctld exited"
    skip "the private Slurm (ports $port, $((port + 1))) did not come up: $why"
fi

n=0
fail=0
ok() {
    n=$((n + 1))
    echo "ok $n - $*"
}
# bad WHAT FILE...: a failure, with the files' last lines
bad() {
    local what=$1 f
    shift
    n=$((n + 1))
    fail=1
    echo "not ok $n - $what"
    for f in "$@"; do
        [ -s "$f" ] && tail -n 15 "$f" | sed "s|^|#   $(basename "$f"): |"
    done
}
# launch NAME COMMAND...: runs it under timeout ($limit s, 60 unless set), stdout to
# $tmp/NAME.out, stderr to $tmp/NAME.err, exit status in $rc
limit=60
launch() {
    local name=$1
    shift
    timeout -k 5 "$limit" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null
    rc=$?
}
out() { echo "$tmp/$1.out" "$tmp/$1.err"; }
# verdict WHAT DONE FILE...: "ok - WHAT: DONE" when $why is empty, else "not ok - WHAT: $why"
# with the files' last lines
verdict() {
    local what=$1 done=$2
    shift 2
    if [ -z "$why" ]; then
        ok "$what: $done"
    else
        bad "$what: ${why#; }" "$@"
    fi
}

# 1: srun -n 2, ranks from the step's variables.
CCL_LOG_LEVEL=info launch c1 srun -n 2 "$bench" allreduce -b 8 -e 64K -f 8 -c
why=""
[ "$rc" = 0 ] || why="exit $rc"
grep -q 'ranks 2 ' "$tmp/c1.out" || why="$why; no \"ranks 2\" header"
for r in 0 1; do
    grep -q "rank $r of 2 (SLURM_PROCID/SLURM_STEP_NUM_TASKS)" "$tmp/c1.err" ||
        why="$why; no \"rank $r of 2 (SLURM_PROCID/SLURM_STEP_NUM_TASKS)\" in the info log"
done
# shellcheck disable=SC2046
verdict "srun -n 2 tutti-bench allreduce -c" "2 ranks from SLURM_PROCID/SLURM_STEP_NUM_TASKS" $(out c1)

# 2: CPU binding: a core each (not oversubscribed), and none.
for bind in cores none; do
    CCL_LOG_LEVEL=info launch "c2$bind" srun -n 2 --cpu-bind="$bind" "$bench" allreduce -b 8 -e 64K -f 8 -c
    why=""
    [ "$rc" = 0 ] || why="exit $rc"
    grep -q 'ranks 2 ' "$tmp/c2$bind.out" || why="$why; no \"ranks 2\" header"
    if [ "$bind" = cores ]; then
        for r in 0 1; do
            grep -qE "rank $r: 2 rank\(s\) on this node, 1 core\(s\) .*not oversubscribed" "$tmp/c2$bind.err" ||
                why="$why; no \"rank $r: 2 rank(s) on this node, 1 core(s) ... not oversubscribed\""
        done
    fi
    if [ -z "$why" ]; then
        if [ "$bind" = cores ]; then
            ok "srun -n 2 --cpu-bind=cores: works, each rank a core of its own, not oversubscribed"
        else
            ok "srun -n 2 --cpu-bind=none: works"
        fi
    else
        # shellcheck disable=SC2046
        bad "srun -n 2 --cpu-bind=$bind: ${why#; }" $(out "c2$bind")
    fi
done

# 3: the store's port is the job's and step's own. The allocation's second step (step 1) prints
# its ids from inside a task, then becomes the benchmark.
cat >"$tmp/ids.sh" <<'SH'
#!/bin/bash
echo "JOB=$SLURM_JOB_ID STEP=$SLURM_STEP_ID TASK=$SLURM_PROCID"
exec "$@"
SH
cat >"$tmp/c3.sh" <<SH
#!/bin/bash
srun -n 2 true || exit 1
exec srun -n 2 bash "$tmp/ids.sh" "$bench" allreduce -b 8 -e 64 -c
SH
CCL_LOG_LEVEL=info launch c3 salloc -n 2 bash "$tmp/c3.sh"
why=""
[ "$rc" = 0 ] || why="exit $rc"
ids=$(grep -E '^JOB=[0-9]+ STEP=[0-9]+ TASK=' "$tmp/c3.out" | cut -d' ' -f1-2 | sort -u)
if ! [[ $ids =~ ^JOB=([0-9]+)\ STEP=([0-9]+)$ ]]; then
    why="$why; the tasks printed no one job and step id: ${ids//$'\n'/ }"
else
    job=${BASH_REMATCH[1]}
    step=${BASH_REMATCH[2]}
    want=$((20000 + 10 * (job % 1000) + step % 10))
    for r in 0 1; do
        grep -qE "rank $r of 2 .*rendezvous at 127\.0\.0\.1:$want\b" "$tmp/c3.err" ||
            why="$why; rank $r logs no \"rendezvous at 127.0.0.1:$want\" (job $job, step $step)"
    done
fi
# shellcheck disable=SC2046
verdict "salloc, second srun step" "the store at 127.0.0.1:$want, the port of job $job step $step" \
    $(out c3)

# 4: two 2-rank steps of one allocation at the same moment, no MASTER_PORT. --overlap lets them
# share the allocation's 2 CPUs; each rank waits at a gate until all 4 have started, so both
# stores are up at once.
mkdir -p "$tmp/gate"
cat >"$tmp/gate.sh" <<SH
#!/bin/bash
touch "$tmp/gate/\$1.\$SLURM_PROCID"
shift
for ((i = 0; i < 600; i++)); do
    [ "\$(ls "$tmp/gate" | wc -l)" -ge 4 ] && break
    sleep 0.1
done
exec "\$@"
SH
cat >"$tmp/c4.sh" <<SH
#!/bin/bash
srun -n 2 --overlap bash "$tmp/gate.sh" a "$bench" allreduce -b 8 -e 4K -f 8 -i 2000 -c >"$tmp/c4a.out" 2>"$tmp/c4a.err" &
a=\$!
srun -n 2 --overlap bash "$tmp/gate.sh" b "$bench" allreduce -b 8 -e 4K -f 8 -i 2000 -c >"$tmp/c4b.out" 2>"$tmp/c4b.err" &
b=\$!
wait \$a
ra=\$?
wait \$b
rb=\$?
echo "step a: exit \$ra, step b: exit \$rb"
[ \$ra = 0 ] && [ \$rb = 0 ]
SH
CCL_LOG_LEVEL=info launch c4 salloc -n 2 bash "$tmp/c4.sh"
why=""
[ "$rc" = 0 ] || why="exit $rc ($(grep '^step a' "$tmp/c4.out"))"
pa=$(grep -o 'rendezvous at [0-9.]*:[0-9]*' "$tmp/c4a.err" 2>/dev/null | sort -u)
pb=$(grep -o 'rendezvous at [0-9.]*:[0-9]*' "$tmp/c4b.err" 2>/dev/null | sort -u)
if [ "$(wc -l <<<"$pa")" != 1 ] || [ "$(wc -l <<<"$pb")" != 1 ] || [ -z "$pa" ] || [ -z "$pb" ]; then
    why="$why; each step's ranks should log one store: ${pa//$'\n'/ } / ${pb//$'\n'/ }"
elif [ "$pa" = "$pb" ]; then
    why="$why; both steps' stores: ${pa#rendezvous at }"
fi
# shellcheck disable=SC2046
verdict "two 2-rank steps at once (srun --overlap)" \
    "both work, stores at ${pa#rendezvous at } and ${pb#rendezvous at }" \
    $(out c4) "$tmp/c4a.out" "$tmp/c4a.err" "$tmp/c4b.out" "$tmp/c4b.err"

# 5: a batch script of 2 tasks that runs tutti-bench itself, without srun: one rank, warned.
cat >"$tmp/c5.sh" <<SH
#!/bin/bash
exec "$bench" allreduce -b 8 -e 64 -c
SH
launch c5 sbatch -n 2 --wait -o "$tmp/c5job.out" -e "$tmp/c5job.err" "$tmp/c5.sh"
why=""
[ "$rc" = 0 ] || why="exit $rc"
grep -q 'ranks 1 ' "$tmp/c5job.out" 2>/dev/null || why="$why; no \"ranks 1\" header"
grep -qi 'warn.*srun' "$tmp/c5job.err" 2>/dev/null || why="$why; no warning that mentions srun"
# shellcheck disable=SC2046
verdict "sbatch -n 2, tutti-bench without srun" "a single rank, with a warning about srun" $(out c5) "$tmp/c5job.out" "$tmp/c5job.err"

# 6: PyTorch over tutti under srun (when the build has tutti_torch).
py=$root/.venv/bin/python
if [ ! -d "$build/python/tutti_torch" ] || [ ! -x "$py" ]; then
    if [ ! -d "$build/python/tutti_torch" ]; then
        why="no tutti_torch in $build/python (a build without the PyTorch backend)"
    else
        why="no $py"
    fi
    ok "srun -n 2 examples/torch_ddp.py # SKIP $why"
    ok "srun -n 2 init_process_group(\"tutti\") # SKIP $why"
else
    limit=90 # importing torch on 2 cores takes a while
    launch c6ddp srun -n 2 env OMP_NUM_THREADS=1 PYTHONPATH="$build/python" "$py" \
        "$root/examples/torch_ddp.py" --steps 3
    why=""
    [ "$rc" = 0 ] || why="exit $rc"
    grep -q '2 ranks, backend tutti' "$tmp/c6ddp.out" || why="$why; no \"2 ranks, backend tutti\""
    grep -q 'replicas identical: yes' "$tmp/c6ddp.out" || why="$why; no \"replicas identical: yes\""
    # shellcheck disable=SC2046
    verdict "srun -n 2 examples/torch_ddp.py" "2 ranks, backend tutti, replicas identical" $(out c6ddp)

    cat >"$tmp/c6.py" <<'PY'
import os
import sys

import torch
import torch.distributed as dist
import tutti_torch  # noqa: F401  (registers the backend, maps SLURM_* to RANK/WORLD_SIZE/LOCAL_RANK)

dist.init_process_group("tutti")
rank, size = dist.get_rank(), dist.get_world_size()
t = torch.ones(8)
dist.all_reduce(t)
env = os.environ
good = (size == int(env["SLURM_STEP_NUM_TASKS"]) and rank == int(env["SLURM_PROCID"])
        and bool((t == size).all()) and env.get("LOCAL_RANK") == env["SLURM_LOCALID"])
print("rank %d of %d: sum %s, LOCAL_RANK %s, SLURM_LOCALID %s: %s"
      % (rank, size, t[0].item(), env.get("LOCAL_RANK"), env["SLURM_LOCALID"],
         "GOOD" if good else "BAD"), flush=True)
dist.destroy_process_group()
sys.exit(0 if good else 1)
PY
    launch c6pg srun -n 2 env OMP_NUM_THREADS=1 PYTHONPATH="$build/python" "$py" "$tmp/c6.py"
    why=""
    [ "$rc" = 0 ] || why="exit $rc"
    [ "$(grep -c ': GOOD$' "$tmp/c6pg.out")" = 2 ] || why="$why; not both ranks GOOD"
    # shellcheck disable=SC2046
    verdict "srun -n 2 init_process_group(\"tutti\")" "all_reduce sums to 2, LOCAL_RANK = SLURM_LOCALID" $(out c6pg)
    limit=60
fi

# 7: rank 1 SIGKILLed mid-run (once rank 0 has printed its table's header, the communicator
# being up), --kill-on-bad-exit=0 so that Slurm leaves rank 0 alone: rank 0 finds out and exits
# by itself with a failure status (not killed by a signal, as it would be at the timeout), naming
# rank 1. Rank 0 writes to files, which rank 1's watcher reads, and leaves its exit status there.
cat >"$tmp/die.sh" <<SH
#!/bin/bash
if [ "\$SLURM_PROCID" = 0 ]; then
    "\$@" >"$tmp/c7r0.out" 2>"$tmp/c7r0.err"
    rc=\$?
    echo \$rc >"$tmp/c7r0.rc"
    exit \$rc
fi
(
    for ((i = 0; i < 600; i++)); do
        grep -qE '^ +size +avg_us' "$tmp/c7r0.out" 2>/dev/null && break
        sleep 0.1
    done
    sleep 0.5
    kill -9 \$\$
) </dev/null >/dev/null 2>&1 &
exec "\$@"
SH
launch c7 srun -n 2 --kill-on-bad-exit=0 bash "$tmp/die.sh" "$bench" allreduce -b 8 -e 8 -i 2000000000
why=""
r0=$(cat "$tmp/c7r0.rc" 2>/dev/null)
if [ -z "$r0" ]; then
    why="rank 0 left no exit status (srun exit $rc: timed out?)"
elif [ "$r0" = 0 ] || [ "$r0" -gt 128 ]; then
    why="rank 0 did not fail by itself: exit $r0 (srun exit $rc)"
fi
grep -qi 'rank 1' "$tmp/c7r0.err" 2>/dev/null || why="$why; rank 0's error does not name rank 1"
grep -qE '^ +size +avg_us' "$tmp/c7r0.out" 2>/dev/null || why="$why; rank 0 never got to its table"
# shellcheck disable=SC2046
verdict "srun -n 2, rank 1 SIGKILLed mid-run" "rank 0 exits $r0 naming rank 1" $(out c7) "$tmp/c7r0.out" "$tmp/c7r0.err"

echo "1..$n"
exit "$fail"
