#!/usr/bin/env bash
# setup.sh: makes .venv-oneccl/, a Python venv holding Intel oneCCL (CPU build) and Intel MPI from
# PyPI at the versions pinned in bench/oneccl/requirements.txt, and compiles bench/ccl-bench.cpp
# against it into .venv-oneccl/bin/ccl-bench. Neither scripts/demo.sh nor scripts/test.sh needs
# it; bench/compare uses it when it is there. Run again, it reinstalls only when the pins changed
# and recompiles only when the sources did. Then run the bench through bench/oneccl/env:
#     bench/oneccl/setup.sh && bench/oneccl/check.sh
#     bench/oneccl/env mpirun -n 2 .venv-oneccl/bin/ccl-bench allreduce -b 8 -e 4M -c
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."

py=${TUTTI_PYTHON:-python3}
venv=.venv-oneccl
req=bench/oneccl/requirements.txt
stamp=$venv/.tutti-requirements

# The oneccl-cpu wheels' libccl.so.1 needs libccl.so.2 (oneCCL's plugin loader and the Intel
# compiler's memcpy/CPU-dispatch routines it calls), and no oneccl-cpu wheel ships it: without it
# nothing links or loads ("libccl.so.2: cannot open shared object file"). The GPU wheel of the
# same release has it, from the same build; take that one file, and only if it is the file
# expected (its sha256 as taken from oneccl-2022.1.2-py2.py3-none-manylinux_2_28_x86_64.whl).
libccl2_from="oneccl==2022.1.2"
libccl2_member="oneccl-2022.1.2.data/data/lib/libccl.so.2"
libccl2_sha256=811746e95b454b35ab96dc02a48fa4e01e67dae3d46126989c6ef7452aa1ff22

say() { echo "bench/oneccl/setup.sh: $*"; }

if ! command -v g++ >/dev/null 2>&1; then
    say "installing g++ (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q g++ </dev/null ||
        { apt-get update -q </dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -q g++ </dev/null; }
fi
if ! "$py" -c 'import venv, ensurepip' 2>/dev/null; then
    say "installing python3-venv (apt-get)"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-venv </dev/null
fi

if [ ! -x $venv/bin/python ]; then
    say "creating $venv with $("$py" --version 2>&1)"
    "$py" -m venv $venv
fi
if ! cmp -s $req $stamp 2>/dev/null; then
    say "installing $req into $venv (about 200 MB of wheels, 540 MB installed)"
    $venv/bin/python -m pip install --disable-pip-version-check -q -r $req </dev/null
    rm -f $venv/lib/libccl.so.2
    cp $req $stamp
fi

if [ ! -f $venv/lib/libccl.so.2 ]; then
    say "oneccl-cpu lacks libccl.so.2: taking it from $libccl2_from (GPU wheel, about 85 MB, not installed)"
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    $venv/bin/python -m pip download --disable-pip-version-check -q --no-deps -d "$tmp" \
        "$libccl2_from" </dev/null
    $venv/bin/python - "$tmp" "$libccl2_member" "$libccl2_sha256" "$venv/lib/libccl.so.2" <<'EOF'
import glob, hashlib, sys, zipfile
tmp, member, want, dest = sys.argv[1:]
wheels = glob.glob(tmp + "/*.whl")
if len(wheels) != 1:
    sys.exit("setup.sh: expected one wheel in %s, found %s" % (tmp, wheels))
data = zipfile.ZipFile(wheels[0]).read(member)
got = hashlib.sha256(data).hexdigest()
if got != want:
    sys.exit("setup.sh: %s in %s has sha256 %s, expected %s; not installing it"
             % (member, wheels[0], got, want))
with open(dest + ".tmp", "wb") as f:
    f.write(data)
EOF
    chmod 755 $venv/lib/libccl.so.2.tmp
    mv $venv/lib/libccl.so.2.tmp $venv/lib/libccl.so.2
fi

exe=$venv/bin/ccl-bench
srcs=(bench/ccl-bench.cpp bench/bench_common.h src/common/parse_size.h $venv/lib/libccl.so.1 $stamp)
stale=0
[ -x $exe ] || stale=1
for s in "${srcs[@]}"; do [ "$s" -nt $exe ] && stale=1; done
if [ $stale = 1 ]; then
    say "compiling $exe"
    prefix=$(cd $venv && pwd)
    # -iquote, not -I: C++ would take bench/compare for the standard header <compare>.
    # DT_RPATH (--disable-new-dtags), not RUNPATH: libccl.so.1 finds libccl.so.2 through it too.
    # ld warns that libccl.so.2 "may conflict with libccl.so.1": two sonames of one library,
    # which is how Intel ships it; the symbols do not overlap.
    g++ -std=c++17 -O2 -g -Wall -Wextra -Wno-missing-field-initializers -iquote bench \
        -I"$prefix/include" bench/ccl-bench.cpp -o $exe.tmp \
        -L"$prefix/lib" -lccl -Wl,--disable-new-dtags,-rpath,"$prefix/lib"
    mv $exe.tmp $exe
fi
say "ready: $exe (oneCCL $(sed -n 's/^Version: //p' $venv/lib/python3*/site-packages/oneccl_cpu-*.dist-info/METADATA))"
