#!/usr/bin/env bash
# bench/gpu/prepare-device.sh: fills .device/ (ignored by git) with what device-check.sh installs on a bare GPU machine
# that has nvcc, PyTorch and NCCL but no MPI, meson or package archive: PyPI's mpich, meson and ninja wheels, and
# Debian's doctest, nlohmann-json, hwloc and pkgconf packages, and TEMPI's sources for bench/gpu/tempi.sh. Run it here,
# on a Debian 12 machine with the archive and PyPI; then carry .device to the GPU machine (the device tool's `carry`)
# and run bench/gpu/device-check.sh there.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=.device
rm -rf "$dir" && mkdir -p "$dir/whl" "$dir/deb"
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$dir/whl" mpich==5.0.2 meson ninja
(cd "$dir/deb" && apt-get download -q doctest-dev nlohmann-json3-dev libhwloc-dev libhwloc15 pkgconf pkgconf-bin \
   libpkgconf3 >/dev/null)
# TEMPI (github cwpearson/tempi) as a plain source tree, from a local git mirror (the `fetch` tool's copy, or
# TEMPI_MIRROR): only what libtempi.so builds from; no docs, scripts, tests, benchmarks or the KaHIP submodule.
tempi_git=${TEMPI_MIRROR:-/work/.mirror/cwpearson+tempi/repo}
if git --git-dir="$tempi_git" rev-parse -q --verify HEAD >/dev/null 2>&1; then
  mkdir -p "$dir/tempi"
  git --git-dir="$tempi_git" archive HEAD -- CMakeLists.txt LICENSE README.md cmake include src \
    thirdparty/martinmoene thirdparty/nlohmann | tar -x -C "$dir/tempi"
  git --git-dir="$tempi_git" rev-parse HEAD >"$dir/tempi/REVISION"
  echo "TEMPI $(cat "$dir/tempi/REVISION") from $tempi_git: $(du -sh "$dir/tempi" | cut -f1)"
else
  echo "prepare-device: no TEMPI git mirror at $tempi_git (fetch github:cwpearson/tempi or set TEMPI_MIRROR);" \
    ".device/tempi left out, so bench/gpu/tempi.sh has nothing to build" >&2
fi
du -sh "$dir"
ls "$dir/whl" "$dir/deb"
