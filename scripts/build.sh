#!/usr/bin/env bash
# build.sh: installs the Debian 12 packages tutti needs (only those missing) and builds it in
# build/; scripts/test.sh and scripts/demo.sh start with it.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

# python3-torch, libtorch-dev, pybind11-dev, python3-dev: the PyTorch backend (python/tutti_torch:
# torch 1.13 for /usr/bin/python3, its C++ headers and libraries, pybind11, Python.h)
packages=(build-essential meson ninja-build pkg-config libfabric-dev libfabric-bin libhwloc-dev
          check mpich libmpich-dev openmpi-bin libopenmpi-dev iproute2 procps
          python3-torch libtorch-dev pybind11-dev python3-dev)

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

if [ -f build/meson-private/coredata.dat ]; then
    meson setup --reconfigure build || meson setup --wipe build
else
    meson setup build
fi
meson compile -C build
