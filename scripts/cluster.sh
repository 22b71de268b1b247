#!/usr/bin/env bash
# cluster.sh: a test cluster on one machine: N "hosts", each a network namespace with one
# interface (eth0) on a private bridge, its link shaped with tc, and jobs launched across them
# the way clusters launch them (an ssh stand-in for MPICH's Hydra and Open MPI, torchrun, or
# RANK/WORLD_SIZE with MASTER_ADDR on host 0).
#
#   cluster.sh up N [--ranks-per-host R] [--rate 10gbit] [--delay 25us] [--loss 0.01%]
#                   [--name NAME] [--mtu BYTES] [--decoy] [--if-possible]
#   cluster.sh down [--name NAME]
#   cluster.sh status [--name NAME]
#   cluster.sh run [--name NAME] [--host I] [--timeout S] -- CMD [ARG...]
#   cluster.sh launch env|torchrun|mpich|openmpi [--name NAME] [--ranks-per-host R] [--np P]
#                   [--port P] [--timeout S] [--cyclic] [--launcher-arg A]... -- CMD [ARG...]
#   cluster.sh ssh [--name NAME] [ssh options] HOST [CMD...]
#   cluster.sh hosts [--name NAME] [--format list|mpich|openmpi]
#
# Hosts are h0 .. h(N-1) at 10.77.0.1 .. 10.77.0.N/24 on their eth0. The bridge has no address
# in the machine's own namespace and nothing is routed: the hosts reach each other and nothing
# else, and the machine's network is untouched. Each cluster has its own bridge, so clusters of
# different names (tests running side by side) never see each other, even with equal addresses.
# Each host has its own /dev/shm too (a tmpfs under the state directory, bound over /dev/shm
# for everything this script runs there), as separate machines have: shared-memory transports
# cannot cross between hosts, and libraries that name their segments after the host name (the
# hosts share the machine's) do not collide.
#
# Shaping, per host link and in both directions: --rate with tc tbf; --delay and --loss with tc
# netem (the delay once on every packet a host sends, the loss likewise). A kernel without
# sch_netem (CONFIG_NET_SCH_NETEM) drops --loss's share of the packets a host sends with an
# nftables rule in the host's namespace instead (numgen random; needs the nft command and
# nf_tables), and cannot add a delay: `up` then fails and says so, unless --if-possible, which
# applies what the kernel can and prints what it left out.
# --decoy gives every host a second interface (dcy0, which libfabric's tcp provider lists before
# eth0) with an address of its own subnet that reaches no other host: the multi-homed host that
# libraries must not be fooled by.
#
# launch starts one job of N x R ranks (--np P: the first P of them, for nodes of unequal
# size), ranks i*R .. i*R+R-1 on host i (--cyclic: rank r on host r mod N), and waits for it:
#   env       one process per rank with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
#             MASTER_ADDR (host 0) and MASTER_PORT, started in its host's namespace
#   torchrun  torch's torchrun (the venv's) on every host, --nnodes N --node-rank i
#             --nproc-per-node R, rendezvous at host 0 (CMD: a Python script and its arguments)
#   mpich     mpiexec.mpich on host 0 with -launcher ssh -launcher-exec pointing at this
#             script's ssh stand-in and a host list (UCX over tcp: the namespaces share /dev/shm)
#   openmpi   mpirun.openmpi on host 0 with the same stand-in as its rsh agent, tcp between hosts
# MASTER_ADDR and MASTER_PORT reach the ranks under every launcher.
#
# State lives in /run/tutti-cluster/NAME (NAME defaults to $TUTTI_CLUSTER, else "tutti"; at most
# 8 letters or digits). `down` kills what still runs in the hosts, deletes the namespaces, the
# bridges and the state, and is a no-op for a cluster that is not there. Needs root and iproute2.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(dirname "$here")
self="$here/$(basename "${BASH_SOURCE[0]}")"
state_root=${TUTTI_CLUSTER_STATE:-/run/tutti-cluster}

die() { echo "cluster.sh: $*" >&2; exit 1; }
note() { echo "cluster.sh: $*" >&2; }

usage() {
    sed -n '2,/^set -euo/p' "$self" | sed '$d' | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

# ---- names ---------------------------------------------------------------------------------

name=${TUTTI_CLUSTER:-tutti}
check_name() {
    [[ $name =~ ^[a-z0-9]{1,8}$ ]] || die "cluster name \"$name\": use 1 to 8 lower-case letters or digits"
}
ns_of() { echo "tcl-$name-h$1"; }         # host i's namespace
veth_of() { echo "tcv$name$1"; }           # host i's link, the bridge's end (<= 15 chars)
dveth_of() { echo "tcd$name$1"; }          # host i's decoy link, the decoy bridge's end
bridge() { echo "tcb$name"; }
dbridge() { echo "tcz$name"; }
state() { echo "$state_root/$name"; }
subnet=10.77.0
addr_of() { echo "$subnet.$(($1 + 1))"; }

# on_host I CMD...: runs CMD in host I: its network namespace, its /dev/shm.
on_host() {
    local i=$1
    shift
    ip netns exec "$(ns_of "$i")" sh -c 'mount --bind "$0" /dev/shm && exec "$@"' \
        "$(state)/shm-h$i" "$@"
}

need_root() {
    [ "$(id -u)" = 0 ] || die "needs root (network namespaces, bridges and tc)"
    command -v ip >/dev/null && command -v tc >/dev/null || die "needs iproute2 (ip, tc)"
}

load() { # load the state of cluster $name into N, R, ...
    local f
    f="$(state)/cluster.env"
    [ -f "$f" ] || die "no cluster \"$name\" is up (scripts/cluster.sh up N --name $name)"
    # shellcheck disable=SC1090
    . "$f"
}

# ---- up ------------------------------------------------------------------------------------

# burst_of RATE: tbf's bucket, 2 ms at the rate (tbf needs at least rate / HZ), 64 KiB at least.
burst_of() {
    local r=$1 n unit bits
    n=${r%%[a-zA-Z]*}
    unit=${r#"$n"}
    case ${unit,,} in
    bit | "") bits=$n ;;
    kbit) bits=$((n * 1000)) ;;
    mbit) bits=$((n * 1000000)) ;;
    gbit) bits=$((n * 1000000000)) ;;
    *) die "--rate $r: write it as tc does, e.g. 10gbit, 100mbit" ;;
    esac
    [[ $n =~ ^[0-9]+$ ]] && [ "$n" -gt 0 ] || die "--rate $r: write it as tc does, e.g. 10gbit"
    local b=$((bits / 8 / 500))
    [ "$b" -ge 65536 ] || b=65536
    echo "$b"
}

have_netem() { # probe: a namespace-local dummy qdisc on lo of a scratch namespace
    local probe="tcl-$name-probe" ok=1
    ip netns add "$probe" 2>/dev/null || return 1
    ip -n "$probe" link set lo up
    ip netns exec "$probe" tc qdisc add dev lo root netem delay 1us >/dev/null 2>&1 || ok=0
    ip netns del "$probe"
    [ $ok = 1 ]
}

have_nft() { # probe: a drop rule of the kind loss_nft adds, in a scratch namespace
    command -v nft >/dev/null 2>&1 || return 1
    local probe="tcl-$name-nprobe" ok=1
    ip netns add "$probe" 2>/dev/null || return 1
    ip netns exec "$probe" nft add table inet tprobe >/dev/null 2>&1 &&
        ip netns exec "$probe" nft add chain inet tprobe out \
            '{ type filter hook output priority 0; }' >/dev/null 2>&1 &&
        ip netns exec "$probe" nft add rule inet tprobe out numgen random mod 1000000 lt 1 drop \
            >/dev/null 2>&1 || ok=0
    ip netns del "$probe"
    [ $ok = 1 ]
}

# loss_ppm P%: the loss as packets per million (0.01% -> 100)
loss_ppm() {
    local l=${1%\%}
    [[ $l =~ ^[0-9]+(\.[0-9]+)?$ ]] || die "--loss $1: a percentage, e.g. 0.01% or 1%"
    awk -v l="$l" 'BEGIN { p = int(l * 10000 + 0.5); if (p < 1 || p > 1000000) exit 1; print p }' ||
        die "--loss $1: from 0.0001% to 100%"
}

# loss_nft NS P%: drop that share of what host NS sends on eth0 (nftables, no netem)
loss_nft() {
    local ns=$1 ppm
    ppm=$(loss_ppm "$2")
    ip netns exec "$ns" nft add table inet tutti_loss
    ip netns exec "$ns" nft add chain inet tutti_loss out '{ type filter hook output priority 0; }'
    ip netns exec "$ns" nft add rule inet tutti_loss out oifname eth0 numgen random mod 1000000 \
        lt "$ppm" drop
}

# shape DEV NS-OR-EMPTY EGRESS-DELAY: the qdisc on one end of a host's link
shape() {
    local dev=$1 ns=$2 delay=$3 loss=$4 tcx=(tc)
    [ -n "$ns" ] && tcx=(ip netns exec "$ns" tc)
    if [ -n "$delay" ] || [ -n "$loss" ]; then
        local args=(netem limit 100000)
        [ -n "$delay" ] && args+=(delay "$delay")
        [ -n "$loss" ] && args+=(loss "$loss")
        [ -n "$rate" ] && args+=(rate "$rate")
        "${tcx[@]}" qdisc replace dev "$dev" root "${args[@]}"
    elif [ -n "$rate" ]; then
        "${tcx[@]}" qdisc replace dev "$dev" root tbf rate "$rate" burst "$(burst_of "$rate")" \
            latency 20ms
    fi
}

cmd_up() {
    local n="" rpp=1 mtu=1500 decoy=0 if_possible=0
    rate="" delay="" loss=""
    while [ $# -gt 0 ]; do
        case $1 in
        --ranks-per-host) rpp=${2:?}; shift 2 ;;
        --rate) rate=${2:?}; shift 2 ;;
        --delay) delay=${2:?}; shift 2 ;;
        --loss) loss=${2:?}; shift 2 ;;
        --name) name=${2:?}; shift 2 ;;
        --mtu) mtu=${2:?}; shift 2 ;;
        --decoy) decoy=1; shift ;;
        --if-possible) if_possible=1; shift ;;
        -h | --help) usage ;;
        -*) die "up: unknown option $1" ;;
        *) [ -z "$n" ] || die "up: one host count, please"; n=$1; shift ;;
        esac
    done
    check_name
    need_root
    [[ $n =~ ^[0-9]+$ ]] && [ "$n" -ge 1 ] && [ "$n" -le 250 ] || die "up N: N hosts, 1 to 250"
    [[ $rpp =~ ^[0-9]+$ ]] && [ "$rpp" -ge 1 ] || die "--ranks-per-host: a positive number"
    [[ $mtu =~ ^[0-9]+$ ]] && [ "$mtu" -ge 576 ] && [ "$mtu" -le 65535 ] || die "--mtu: 576 to 65535"
    [ -n "$rate" ] && burst_of "$rate" >/dev/null
    [ -e "$(state)" ] && die "cluster \"$name\" is up already; \`scripts/cluster.sh down --name $name\` first"
    local left_out="" nft_loss=""
    [ -z "$loss" ] || loss_ppm "$loss" >/dev/null
    if { [ -n "$delay" ] || [ -n "$loss" ]; } && ! have_netem; then
        if [ -n "$loss" ] && have_nft; then
            nft_loss=$loss # dropped by nftables instead; the delay alone stays out of reach
            loss=""
        fi
        if [ -n "$delay" ]; then
            if [ $if_possible = 0 ]; then
                die "this kernel has no netem qdisc (CONFIG_NET_SCH_NETEM / modprobe sch_netem), \
so --delay $delay cannot be emulated; leave it out, or add --if-possible to shape the rest alone"
            fi
            left_out="--delay $delay (no netem in this kernel)"
            note "left out: $left_out"
            delay=""
        fi
        if [ -n "$loss" ]; then
            if [ $if_possible = 0 ]; then
                die "this kernel has no netem qdisc and no usable nftables (the nft command, \
nf_tables), so --loss $loss cannot be emulated; leave it out, or add --if-possible"
            fi
            left_out="${left_out:+$left_out, }--loss $loss (neither netem nor nftables here)"
            note "left out: $left_out"
            loss=""
        fi
    fi
    mkdir -p "$(state)"
    # From here on a failure removes what was made.
    trap 'rc=$?; if [ $rc != 0 ]; then note "up failed; removing what it made"; cmd_down_quiet; fi' EXIT
    ip link add "$(bridge)" type bridge
    ip link set "$(bridge)" mtu "$mtu"
    ip link set "$(bridge)" up
    if [ $decoy = 1 ]; then
        ip link add "$(dbridge)" type bridge
        ip link set "$(dbridge)" up
    fi
    local i ns
    for ((i = 0; i < n; i++)); do
        ns=$(ns_of "$i")
        ip netns add "$ns"
        ip -n "$ns" link set lo up
        mkdir -p "$(state)/shm-h$i"
        mount -t tmpfs -o mode=1777,size=50% "tutti-cluster-$name-h$i" "$(state)/shm-h$i"
        ip link add "$(veth_of "$i")" type veth peer name eth0 netns "$ns"
        ip link set "$(veth_of "$i")" mtu "$mtu"
        ip -n "$ns" link set eth0 mtu "$mtu"
        ip link set "$(veth_of "$i")" master "$(bridge)" up
        ip -n "$ns" addr add "$(addr_of "$i")/24" dev eth0
        ip -n "$ns" link set eth0 up
        if [ $decoy = 1 ]; then # after eth0: libfabric's tcp provider then lists it first
            ip link add "$(dveth_of "$i")" type veth peer name dcy0 netns "$ns"
            ip link set "$(dveth_of "$i")" master "$(dbridge)" up
            # its own /24: reachable from this host only
            ip -n "$ns" addr add "10.78.$((i + 1)).1/24" dev dcy0
            ip -n "$ns" link set dcy0 up
        fi
        shape eth0 "$ns" "$delay" "$loss"     # what the host sends
        [ -z "$nft_loss" ] || loss_nft "$ns" "$nft_loss"
        shape "$(veth_of "$i")" "" "" ""       # what it receives: the rate only
    done
    local loss_text=${loss:-none}
    [ -z "$nft_loss" ] || loss_text="$nft_loss (nftables)"
    cat >"$(state)/cluster.env" <<EOF
N=$n
R=$rpp
RATE='$rate'
DELAY='$delay'
LOSS='$loss_text'
LEFT_OUT='$left_out'
MTU=$mtu
DECOY=$decoy
EOF
    # The ssh stand-in that launchers are given: this script, for this cluster.
    cat >"$(state)/ssh" <<EOF
#!/bin/sh
exec "$self" ssh --name "$name" "\$@"
EOF
    chmod 755 "$(state)/ssh"
    # Wait until every host answers on its link (the bridge learns its ports).
    wait_links "$n"
    trap - EXIT
    note "cluster \"$name\" up: $n host(s) x $rpp rank(s), $(addr_of 0) .. $(addr_of $((n - 1))), \
rate ${rate:-unshaped}, delay ${delay:-none}, loss ${loss_text}"
}

wait_links() {
    local n=$1 i t
    [ "$n" -gt 1 ] || return 0
    for ((i = 1; i < n; i++)); do
        for t in $(seq 50); do
            # a TCP connect to a closed port on host i: refused (RST) means the link works
            local out
            out=$(on_host 0 timeout 2 bash -c \
                "exec 3<>/dev/tcp/$(addr_of "$i")/9" 2>&1 || true)
            case $out in *refused*) break ;; esac
            [ "$t" -lt 50 ] || die "host h$i ($(addr_of "$i")) does not answer host h0"
            sleep 0.1
        done
    done
}

# ---- down ----------------------------------------------------------------------------------

cmd_down_quiet() {
    local ns pid
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^tcl-$name-(h[0-9]+|probe)$" || true); do
        # Whatever still runs there was started in this cluster: end it, by process id.
        for pid in $(ip netns pids "$ns" 2>/dev/null || true); do
            kill -9 "$pid" 2>/dev/null || true
        done
        ip netns del "$ns" 2>/dev/null || true
    done
    ip link del "$(bridge)" 2>/dev/null || true
    ip link del "$(dbridge)" 2>/dev/null || true
    local m
    for m in $(awk -v d="$(state)/shm-h" 'index($2, d) == 1 {print $2}' /proc/mounts); do
        umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true
    done
    # veths die with their namespace; a half-made one may remain on the bridge's side
    local dev
    for dev in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
        grep -E "^tc[vd]$name[0-9]+$" || true); do
        ip link del "$dev" 2>/dev/null || true
    done
    rm -rf "$(state)"
}

cmd_down() {
    while [ $# -gt 0 ]; do
        case $1 in
        --name) name=${2:?}; shift 2 ;;
        -h | --help) usage ;;
        *) die "down: unknown argument $1" ;;
        esac
    done
    check_name
    need_root
    cmd_down_quiet
}

# ---- status, hosts -------------------------------------------------------------------------

cmd_status() {
    while [ $# -gt 0 ]; do
        case $1 in
        --name) name=${2:?}; shift 2 ;;
        *) die "status: unknown argument $1" ;;
        esac
    done
    check_name
    load
    echo "cluster $name: $N host(s) x $R rank(s) per host, mtu $MTU"
    echo "shaping: rate ${RATE:-unshaped}, delay ${DELAY:-none}, loss ${LOSS:-none}${LEFT_OUT:+ (left out: $LEFT_OUT)}"
    local i ns
    for ((i = 0; i < N; i++)); do
        ns=$(ns_of "$i")
        if ! ip netns list | grep -qw "$ns"; then
            echo "h$i  $(addr_of "$i")  MISSING namespace $ns"
            continue
        fi
        echo "h$i  $(addr_of "$i")  ns $ns  qdisc: $(ip netns exec "$ns" tc qdisc show dev eth0 | head -1)"
    done
}

cmd_hosts() {
    local fmt=list
    while [ $# -gt 0 ]; do
        case $1 in
        --name) name=${2:?}; shift 2 ;;
        --format) fmt=${2:?}; shift 2 ;;
        *) die "hosts: unknown argument $1" ;;
        esac
    done
    check_name
    load
    local i
    for ((i = 0; i < N; i++)); do
        case $fmt in
        list) echo "$(addr_of "$i")" ;;
        mpich) echo "$(addr_of "$i"):$R" ;;
        openmpi) echo "$(addr_of "$i") slots=$R" ;;
        *) die "hosts --format: list, mpich or openmpi" ;;
        esac
    done
}

# ---- ssh stand-in --------------------------------------------------------------------------

# What ssh would do on a cluster: skip ssh's own options, find the host, run the command line
# there through a shell, in the home directory, with a fresh environment (ssh forwards none).
cmd_ssh() {
    while [ $# -gt 0 ]; do
        case $1 in
        --name) name=${2:?}; shift 2 ;;
        -[bcDEeFIiJLlmOopQRSWw]) shift 2 ;; # ssh options that take an argument
        -*) shift ;;
        *) break ;;
        esac
    done
    check_name
    load
    local host=${1:?"ssh: which host?"} i at=""
    shift
    for ((i = 0; i < N; i++)); do
        if [ "$host" = "$(addr_of "$i")" ] || [ "$host" = "h$i" ]; then
            at=$i
        fi
    done
    [ -n "$at" ] || die "ssh: no host \"$host\" in cluster $name (hosts: h0..h$((N - 1)), $(addr_of 0)..)"
    [ $# -gt 0 ] || die "ssh: no command (an interactive login is not offered)"
    cd "${HOME:-/}" 2>/dev/null || cd /
    local cmdline="$*"
    exec env -i HOME="${HOME:-/}" PATH="$PATH" LANG=C.UTF-8 USER="$(id -un)" \
        "$self" _on_host --name "$name" "$at" sh -c "$cmdline"
}

# ---- run -----------------------------------------------------------------------------------

cmd_run() {
    local only="" tmo=600
    while [ $# -gt 0 ]; do
        case $1 in
        --name) name=${2:?}; shift 2 ;;
        --host) only=${2:?}; shift 2 ;;
        --timeout) tmo=${2:?}; shift 2 ;;
        --) shift; break ;;
        *) break ;;
        esac
    done
    check_name
    need_root
    load
    [ $# -gt 0 ] || die "run: no command"
    local i pids=() rc=0
    for ((i = 0; i < N; i++)); do
        [ -z "$only" ] || [ "$only" = "$i" ] || continue
        (
            set +e
            on_host "$i" env CLUSTER_HOST="$i" CLUSTER_HOSTS="$N" \
                CLUSTER_ADDR="$(addr_of "$i")" MASTER_ADDR="$(addr_of 0)" \
                timeout -k 5 "$tmo" "$@" 2>&1 | sed -u "s/^/h$i: /"
            exit "${PIPESTATUS[0]}"
        ) &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || rc=$?; done
    return $rc
}

# ---- launch --------------------------------------------------------------------------------

cmd_launch() {
    local kind=${1:-}
    [ $# -gt 0 ] && shift
    local rpp="" port=29500 tmo=600 cyclic=0 largs=() np=""
    while [ $# -gt 0 ]; do
        case $1 in
        --name) name=${2:?}; shift 2 ;;
        --ranks-per-host) rpp=${2:?}; shift 2 ;;
        --port) port=${2:?}; shift 2 ;;
        --np) np=${2:?}; shift 2 ;;
        --timeout) tmo=${2:?}; shift 2 ;;
        --cyclic) cyclic=1; shift ;;
        --launcher-arg) largs+=("${2?}"); shift 2 ;;
        --) shift; break ;;
        *) die "launch: unknown option $1 (the command goes after --)" ;;
        esac
    done
    check_name
    need_root
    load
    [ -n "$rpp" ] || rpp=$R
    [ $# -gt 0 ] || die "launch $kind: no command after --"
    local master
    master=$(addr_of 0)
    [ -n "$np" ] || np=$((N * rpp))
    [[ $np =~ ^[0-9]+$ ]] && [ "$np" -ge 1 ] && [ "$np" -le $((N * rpp)) ] ||
        die "launch: --np $np: 1 to $((N * rpp)) (hosts x ranks per host)"
    [ "$np" = $((N * rpp)) ] || [ "$kind" != torchrun ] ||
        die "launch torchrun: --np must be hosts x ranks per host"
    case $kind in
    env) launch_env "$@" ;;
    torchrun) launch_torchrun "$@" ;;
    mpich)
        local hosts="" i
        [ $cyclic = 0 ] || die "launch mpich: --cyclic is Hydra's own business (-ppn 1)"
        for ((i = 0; i < N; i++)); do hosts+="${hosts:+,}$(addr_of "$i"):$rpp"; done
        # UCX over tcp: the namespaces share /dev/shm and the boot id, so UCX's shared memory
        # would cross between hosts and bypass their links; Hydra's ranks of one host still
        # talk over MPICH's own shared memory.
        timeout -k 5 "$tmo" "$self" _on_host --name "$name" 0 mpiexec.mpich -launcher ssh \
            -launcher-exec "$(state)/ssh" -hosts "$hosts" -n "$np" \
            -genv UCX_TLS tcp,self -genv UCX_NET_DEVICES eth0 \
            -genv MASTER_ADDR "$master" -genv MASTER_PORT "$port" "${largs[@]}" "$@"
        ;;
    openmpi)
        local hosts="" i
        [ $cyclic = 0 ] || largs+=(--map-by node)
        for ((i = 0; i < N; i++)); do hosts+="${hosts:+,}$(addr_of "$i"):$rpp"; done
        local rootarg=()
        [ "$(id -u)" = 0 ] && rootarg=(--allow-run-as-root)
        timeout -k 5 "$tmo" "$self" _on_host --name "$name" 0 mpirun.openmpi "${rootarg[@]}" \
            --oversubscribe -H "$hosts" -np "$np" --mca plm_rsh_agent "$(state)/ssh" \
            --mca pml ob1 --mca btl tcp,self,vader --mca btl_tcp_if_include eth0 \
            --mca oob_tcp_if_include eth0 -x MASTER_ADDR="$master" -x MASTER_PORT="$port" \
            "${largs[@]}" "$@"
        ;;
    *) die "launch: env, torchrun, mpich or openmpi, not \"$kind\"" ;;
    esac
}

launch_env() {
    local r h l s pids=() rc=0
    for ((r = 0; r < np; r++)); do
        if [ $cyclic = 1 ]; then h=$((r % N)) l=$((r / N)); else h=$((r / rpp)) l=$((r % rpp)); fi
        local lsize=$rpp # ranks on host h, when --np leaves the last ones short
        if [ $cyclic = 1 ]; then
            lsize=$(((np - h + N - 1) / N))
        elif [ $(((h + 1) * rpp)) -gt "$np" ]; then
            lsize=$((np - h * rpp))
        fi
        on_host "$h" env RANK="$r" WORLD_SIZE="$np" LOCAL_RANK="$l" \
            LOCAL_WORLD_SIZE="$lsize" MASTER_ADDR="$master" MASTER_PORT="$port" \
            timeout -k 5 "$tmo" "$@" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || { s=$?; [ $rc != 0 ] || rc=$s; }; done
    return $rc
}

launch_torchrun() {
    local trun="$root/.venv/bin/torchrun" i s pids=() rc=0
    [ -x "$trun" ] || trun=$(command -v torchrun) || die "launch torchrun: no torchrun (bash scripts/venv.sh)"
    [ $cyclic = 0 ] || die "launch torchrun: torchrun places ranks by node only"
    # torchrun runs a .py file (or -m module) with Python; anything else (a binary, python
    # itself) is run as it is
    local direct=()
    case "${1:-}" in *.py | -m) ;; *) direct=(--no-python) ;; esac
    for ((i = 0; i < N; i++)); do
        on_host "$i" timeout -k 5 "$tmo" "$trun" --nnodes "$N" --node-rank "$i" \
            --nproc-per-node "$rpp" --master-addr "$master" --master-port "$port" \
            "${direct[@]}" "${largs[@]}" "$@" &
        pids+=($!)
    done
    for p in "${pids[@]}"; do wait "$p" || { s=$?; [ $rc != 0 ] || rc=$s; }; done
    return $rc
}

# ---- main ----------------------------------------------------------------------------------

cmd=${1:-}
[ $# -gt 0 ] && shift
case $cmd in
up) cmd_up "$@" ;;
down) cmd_down "$@" ;;
status) cmd_status "$@" ;;
hosts) cmd_hosts "$@" ;;
run) cmd_run "$@" ;;
launch) cmd_launch "$@" ;;
ssh) cmd_ssh "$@" ;;
_on_host) # _on_host --name NAME I CMD...: what on_host does, for the ssh stand-in and timeout
    [ "${1:-}" = --name ] && name=${2:?} && shift 2
    check_name
    on_host "$@"
    ;;
-h | --help | help) usage ;;
*) usage 2 ;;
esac
