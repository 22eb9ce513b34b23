#!/usr/bin/env bash
# bench/gpu/prepare-device.sh: fills .device/ (ignored by git) with what device-check.sh installs on a bare GPU machine
# that has nvcc, PyTorch and NCCL but no MPI, meson or package archive: PyPI's mpich, meson and ninja wheels, and
# Debian's doctest, nlohmann-json, hwloc and pkgconf packages. Run it here, on a Debian 12 machine with the archive
# and PyPI; then carry .device to the GPU machine (the device tool's `carry`) and run bench/gpu/device-check.sh there.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=.device
rm -rf "$dir" && mkdir -p "$dir/whl" "$dir/deb"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$dir/whl" mpich==5.0.2 meson ninja
(cd "$dir/deb" && apt-get download -q doctest-dev nlohmann-json3-dev libhwloc-dev libhwloc15 pkgconf pkgconf-bin \
   libpkgconf3 >/dev/null)
du -sh "$dir"
ls "$dir/whl" "$dir/deb"
