#!/usr/bin/env bash
# verify-kernels.sh: builds tests/kernels_verify.c with plain gcc (no meson, Check or libfabric
# needed), each SIMD kernel variant compiled apart with its own -m flags as meson does, and runs
# it: every variant this CPU runs against the scalar kernel, bit for bit. Arguments go to the
# program (--full: all 2^32 fp16 operand pairs, a few minutes). CC picks the compiler.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

CC=${CC:-gcc}
out=$(mktemp -d "${TMPDIR:-/tmp}/tutti-kv.XXXXXX")
trap 'rm -rf "$out"' EXIT
cflags=(-O2 -std=gnu11 -D_GNU_SOURCE -DTUTTI_BUILDING_LIBRARY -Wall -Wextra -Werror -Iinclude)
kflags=("${cflags[@]}" -ffp-contract=off)

accepts() { echo 'int x;' | "$CC" "$1" -x c -c -o /dev/null - 2>/dev/null; }

objs=()
defs=()
avx512=(-mavx512f -mavx512bw -mavx512vl)
if [ "$(uname -m)" = x86_64 ] && accepts -mavx512bf16; then
    variants=("avx2:-mavx2 -mf16c" "avx512:${avx512[*]}" "avx512bf:${avx512[*]} -mavx512bf16")
    defs+=(-DTUTTI_KV_X86=1)
    if accepts -mavx512fp16; then
        variants+=("avx512fp16:${avx512[*]} -mavx512fp16")
        defs+=(-DTUTTI_KV_FP16=1)
    else
        echo "verify-kernels.sh: $CC lacks -mavx512fp16 (gcc 12 has it): avx512fp16 not built"
    fi
    for v in "${variants[@]}"; do
        name=${v%%:*}
        read -r -a flags <<<"${v#*:}"
        "$CC" "${kflags[@]}" "${flags[@]}" -c "src/kernels/reduce_$name.c" -o "$out/reduce_$name.o"
        objs+=("$out/reduce_$name.o")
    done
else
    echo "verify-kernels.sh: not x86-64 or $CC lacks -mavx512bf16: scalar kernel only"
fi

"$CC" "${kflags[@]}" "${defs[@]}" -c src/kernels/kernels.c -o "$out/kernels.o"
"$CC" "${kflags[@]}" -c src/kernels/reduce_scalar.c -o "$out/reduce_scalar.o"
"$CC" "${cflags[@]}" -o "$out/kernels_verify" tests/kernels_verify.c \
    src/common/{status,time,log,env,dtype}.c "$out/kernels.o" "$out/reduce_scalar.o" \
    "${objs[@]}" -lm -pthread
echo "verify-kernels.sh: built with $("$CC" --version | head -n1)"
"$out/kernels_verify" "$@"
