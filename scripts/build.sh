#!/usr/bin/env bash
# build.sh: installs the Debian 12 packages tutti needs (only those missing), makes the Python
# environment .venv/ (scripts/venv.sh: torch 2.13.0 and the rest, pinned), and builds tutti and
# its PyTorch backend in build/ with the venv's meson, so that the backend is built against the
# venv's torch. scripts/test.sh and scripts/demo.sh start with it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# python3-dev, python3-venv: the venv and Python.h for the PyTorch backend (torch itself, with
# its C++ headers, and meson-python come from PyPI into .venv); clang and libclang-rt-14-dev
# (libFuzzer's runtime): the fuzz build of scripts/test.sh; slurm-wlm and munge: tests/slurm.sh
# runs the ranks under a Slurm of its own
packages=(build-essential meson ninja-build pkg-config libfabric-dev libfabric-bin libhwloc-dev
          check mpich libmpich-dev openmpi-bin libopenmpi-dev iproute2 procps nftables
          python3-dev python3-venv clang libclang-rt-14-dev slurm-wlm munge)

installed() {
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}

if command -v dpkg-query >/dev/null 2>&1; then
    missing=()
    for p in "${packages[@]}"; do
        installed "$p" || missing+=("$p")
    done
    if [ ${#missing[@]} -gt 0 ]; then
        echo "build.sh: installing ${missing[*]}"
        sudo=()
        if [ "$(id -u)" -ne 0 ]; then
            if ! command -v sudo >/dev/null 2>&1; then
                echo "build.sh: missing packages: ${missing[*]}; run as root or install them" >&2
                exit 1
            fi
            sudo=(sudo)
        fi
        "${sudo[@]}" apt-get update
        "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
            apt-get install -y --no-install-recommends "${missing[@]}" </dev/null
    fi
else
    echo "build.sh: no dpkg here; assuming the packages are installed: ${packages[*]}" >&2
fi

bash scripts/venv.sh
meson=.venv/bin/meson
# -Dtorch=enabled: the venv has torch, so a backend that does not build is an error here, not a
# quietly skipped test suite
opts=(-Dtorch=enabled)
if [ -f build/meson-private/coredata.dat ]; then
    "$meson" setup --reconfigure build "${opts[@]}" || "$meson" setup --wipe build "${opts[@]}"
else
    "$meson" setup build "${opts[@]}"
fi
"$meson" compile -C build
