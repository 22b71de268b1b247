#!/usr/bin/env bash
# check_layers.sh: fails when a file under src/ includes a header of a layer above its own, so
# that calls keep running down the layers (docs/architecture.md):
#   pg -> algos -> transport -> bootstrap -> common, and algos -> kernels -> common.
# Usage: check_layers.sh SRC_DIR, or check_layers.sh --self-test (proves it catches an upward
# include and passes a downward one, on a small tree of its own).
set -euo pipefail

# allowed LAYER: the layers whose headers a file of LAYER may include.
allowed() {
    case $1 in
    common) echo "common" ;;
    kernels) echo "common kernels" ;;
    bootstrap) echo "common bootstrap" ;;
    transport) echo "common bootstrap transport" ;;
    algos) echo "common kernels bootstrap transport algos" ;;
    pg) echo "common kernels bootstrap transport algos pg" ;;
    *) return 1 ;;
    esac
}

check_tree() { # check_tree SRC_DIR: prints each violation, returns 1 if any
    local src bad=0 file layer inc target tlayer
    src=$(realpath "$1")
    while IFS= read -r file; do
        layer=${file#"$src"/}
        layer=${layer%%/*}
        if ! allowed "$layer" >/dev/null; then
            echo "$file: in no known layer (src/$layer); add the folder to tests/check_layers.sh"
            bad=1
            continue
        fi
        while IFS= read -r inc; do
            [ "$inc" = tutti.h ] && continue # the public API, below everything
            target=$(realpath -m "$(dirname "$file")/$inc")
            if [ ! -e "$target" ]; then
                echo "$file: includes \"$inc\", which is not there (include headers by their path from the including file)"
                bad=1
                continue
            fi
            case $target in
            "$src"/*) ;;
            *)
                echo "$file: includes \"$inc\" from outside src/"
                bad=1
                continue
                ;;
            esac
            tlayer=${target#"$src"/}
            tlayer=${tlayer%%/*}
            if [[ " $(allowed "$layer") " != *" $tlayer "* ]]; then
                echo "$file: includes \"$inc\" from $tlayer/, a layer above $layer/ (may include: $(allowed "$layer"))"
                bad=1
            fi
        done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
    done < <(find "$src" -type f \( -name '*.c' -o -name '*.h' \) | sort)
    return $bad
}

if [ "${1:-}" = --self-test ]; then
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    mkdir -p "$tmp/src/common" "$tmp/src/transport" "$tmp/src/algos"
    echo '#include "tutti.h"' >"$tmp/src/common/common.h"
    echo '#include "../common/common.h"' >"$tmp/src/transport/transport.h"
    echo '#include "../transport/transport.h"' >"$tmp/src/algos/algos.h"
    check_tree "$tmp/src" || { echo "self-test: a downward tree was refused"; exit 1; }
    echo '#include "../algos/algos.h"' >"$tmp/src/transport/shm.c"
    if out=$(check_tree "$tmp/src"); then
        echo "self-test: transport/ including algos/ was not caught"
        exit 1
    fi
    echo "$out" | grep -q 'shm.c: includes "../algos/algos.h" from algos/' ||
        { echo "self-test: unexpected report: $out"; exit 1; }
    echo "self-test: an upward include is caught, downward ones pass"
    exit 0
fi

[ $# -eq 1 ] || { echo "usage: $0 SRC_DIR | --self-test" >&2; exit 2; }
if check_tree "$1"; then
    echo "layers: every include in $1 goes down the layers"
else
    exit 1
fi
