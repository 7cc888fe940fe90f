#!/bin/bash
# The kernels' exactness tests run by an arm64 Python on an x86 machine (issue 31 #3; design
# notes "arm64 (issue 31 #3)"): an arm64 Debian bookworm userland (debootstrap's first stage, its
# packages unpacked; no chroot, so no binfmt_misc needed), the aarch64 wheels of the numpy, numba
# and llvmlite versions installed here, a snapshot of this tree, pytest under qemu-user.
#
#   bash benchmarks/arm64_qemu.sh [WORKDIR [PYTEST ARGS...]]
#
# Default tests: the convolution kernels against plain-numpy references (int_conv, MAX78000,
# NVDLA post-processing). numba there sees a "generic" arm64 CPU (LLVM reads the host's x86
# /proc/cpuinfo under qemu-user); NUMBA_CPU_NAME=neoverse-n1 NUMBA_CPU_FEATURES=+neon,+dotprod,...
# in the environment compile for a given core instead (qemu emulates them all). Slow: ~6 min
# for the default tests at nice 19. Needs root for apt (qemu-user-static, debootstrap) and the
# network (Debian, PyPI).
set -euo pipefail
W=${1:-/tmp/accelstub-arm64}
shift || true
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TESTS=(tests/framework/test_int_conv.py tests/max78000/test_max78000_kernels.py
       tests/nvdla/test_nvdla_post_process.py)
[ $# -gt 0 ] && TESTS=("$@")

if ! command -v qemu-aarch64-static >/dev/null || ! command -v debootstrap >/dev/null; then
    apt-get update -q && apt-get install -y -q qemu-user-static debootstrap
fi
if [ ! -x "$W/root/usr/bin/python3.11" ]; then
    debootstrap --foreign --arch=arm64 --variant=minbase --include=python3 bookworm "$W/root" \
        http://deb.debian.org/debian
    for deb in "$W"/root/var/cache/apt/archives/*.deb; do dpkg-deb -x "$deb" "$W/root"; done
fi
if [ ! -d "$W/site/numba" ]; then
    version() { python3 -c "import $1; print($1.__version__)"; }
    pip download -q -d "$W/wheels" --no-deps --only-binary=:all: --python-version 3.11 \
        --implementation cp --platform manylinux_2_28_aarch64 --platform manylinux2014_aarch64 \
        --platform manylinux_2_17_aarch64 --platform any \
        "numpy==$(version numpy)" "numba==$(version numba)" "llvmlite==$(version llvmlite)" \
        pytest pluggy iniconfig packaging pygments pytest-timeout hypothesis attrs sortedcontainers
    for whl in "$W"/wheels/*.whl; do python3 -m zipfile -e "$whl" "$W/site"; done
fi
# a snapshot (tracked and new files as they are now), in setup.py's layout: api/ is the package
# accelstub, the other top folders its subpackages
rm -rf "$W/src" "$W/ns"
mkdir -p "$W/src" "$W/ns"
(cd "$ROOT" && git ls-files -z -c -o --exclude-standard | tar --null --ignore-failed-read -T - -cf -) |
    tar -xf - -C "$W/src"
for d in stub devices tui emu configs testkit; do ln -sfn "../$d" "$W/src/api/$d"; done
ln -sfn "$W/src/api" "$W/ns/accelstub"

cd "$W/src"
export PYTHONPATH="$W/site:$W/ns" NUMBA_CACHE_DIR="$W/numba-cache" PYTHONDONTWRITEBYTECODE=1
exec nice -n 19 qemu-aarch64-static -L "$W/root" "$W/root/usr/bin/python3.11" -m pytest -q \
    -p no:cacheprovider --noconftest -o timeout=0 "${TESTS[@]}"
