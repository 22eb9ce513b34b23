#!/usr/bin/env bash
# bench/gpu/tempi.sh: builds TEMPI (patched for CUDA 13) from a source snapshot and compares its MPI_Pack of device
# buffers with shunt's: bench-gpu-mpi-pack under LD_PRELOAD=libtempi.so and under LD_PRELOAD=libshunt.so, interleaved.
# Run from the repository root on the GPU machine after device-check.sh's build (MPI compilers, cmake and nvcc on
# PATH, or device-check.sh's MPICH under /tmp/shunt-dev). Writes OUT/tempi.txt (the side-by-side table) and
# OUT/tempi.log (build and run logs). Meant to end within 90 s.
#   usage: bench/gpu/tempi.sh [--build-only] [--host] [--rounds R] [--build DIR] [--budget S] [--jobs N] SRC OUT
#   --build-only  build libtempi.so and check that both preloads load and reach MPI (no GPU needed)
#   --host        the whole comparison on host buffers, TEMPI passing through (checks this script without a GPU)
#   --rounds R    rounds of one TEMPI and one shunt run each, alternating which goes first (default 5)
#   --build DIR   shunt's meson build directory (default build-device)
#   --budget S    start no round after S seconds from the script's start (default 80)
#   --jobs N      parallel jobs of TEMPI's build (default 16)
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
usage() { sed -n '7,14p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
build_only=0 host=0 rounds=5 build=build-device budget=80 jobs=16
while [ $# -gt 0 ]; do
  case $1 in
    --build-only) build_only=1 ;;
    --host) host=1 ;;
    --rounds) rounds=${2:?}; shift ;;
    --build) build=${2:?}; shift ;;
    --budget) budget=${2:?}; shift ;;
    --jobs) jobs=${2:?}; shift ;;
    -h|--help) usage ;;
    -*) echo "tempi.sh: unknown option $1" >&2; usage ;;
    *) break ;;
  esac
  shift
done
[ $# -eq 2 ] || usage
src=$1 out=$2
start=$SECONDS
mkdir -p "$out"
table="$out/tempi.txt" log="$out/tempi.log"
: >"$log"
say() { printf '[%4ds] %s\n' "$((SECONDS - start))" "$*" | tee -a "$log" >&2; }
fail() { say "FAILED: $*"; { echo "tempi.sh: $*"; echo "(see tempi.log)"; } >"$table"; exit 1; }
[ -f "$src/CMakeLists.txt" ] && [ -f "$src/src/pack.cpp" ] || fail "no TEMPI sources at $src (bench/gpu/prepare-device.sh)"
bench="$PWD/$build/bench/gpu/bench-gpu-mpi-pack"
libshunt="$PWD/$build/interpose/libshunt.so"

# 1. A private copy of the sources, patched for CUDA 13 and for this build.
work=/tmp/shunt-tempi
rm -rf "$work" && mkdir -p "$work" && cp -r "$src" "$work/src" || fail "copying $src"
s=$work/src
# CUDA 13 ships NVTX only as the header-only nvtx3 (no libnvToolsExt): include it from there, link nothing but dl.
grep -rlE '#include <nvToolsExt(CudaRt)?\.h>' "$s/src" "$s/include" | xargs -r sed -i -E \
  's|#include <nvToolsExt(CudaRt)?\.h>|#include <nvtx3/nvToolsExt\1.h>|'
sed -i 's|target_link_libraries(tempi PUBLIC ${NVTOOLSEXT_LIB})|target_link_libraries(tempi PUBLIC ${CMAKE_DL_LIBS})|' \
  "$s/CMakeLists.txt"
# partition.hpp and topology.hpp use size_t without <cstddef>, which newer libstdc++ no longer brings in through
# <vector> (GCC 13 also stopped bringing <cstdint>): every TEMPI header includes both first.
for f in "$s"/include/*.hpp "$s"/include/*.cuh "$s"/src/internal/*.hpp; do
  grep -q '^#pragma once' "$f" && sed -i '0,/^#pragma once/s||#pragma once\n#include <cstddef>\n#include <cstdint>|' "$f"
done
# std::filesystem is in libstdc++ itself since GCC 9; libstdc++fs may be absent.
sed -i 's|target_link_libraries(tempi PUBLIC stdc++fs)||' "$s/CMakeLists.txt"
# Quieter logs: no ptxas register report for every kernel.
sed -i '/-Xptxas=-v;/d' "$s/CMakeLists.txt"
# The snapshot has only the library: no support/, test/ or bin/ directories to add.
for d in support test bin; do
  [ -d "$s/$d" ] || sed -i "s|^add_subdirectory($d)|# add_subdirectory($d)|" "$s/CMakeLists.txt"
done
grep -rqE '#include <nvToolsExt' "$s/src" "$s/include" && fail "a nvToolsExt include was left unpatched"
grep -q 'PUBLIC ${NVTOOLSEXT_LIB}' "$s/CMakeLists.txt" && fail "the nvToolsExt link was left unpatched"

# 2. Configure and build libtempi.so only, with the MPI compilers on PATH and native code for this GPU.
if ! command -v mpicxx >/dev/null && [ -x /tmp/shunt-dev/py/bin/mpicxx ]; then
  export PATH="/tmp/shunt-dev/py/bin:$PATH"  # device-check.sh's MPICH wheel, when run on its own
fi
mpicc=$(command -v mpicc) && mpicxx=$(command -v mpicxx) || fail "no mpicc/mpicxx on PATH"
nvcc=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
[ -x "$nvcc" ] || fail "no nvcc"
arch=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
[ -n "$arch" ] || arch=90
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
t0=$SECONDS
say "TEMPI $(cat "$s/REVISION" 2>/dev/null || echo '(no REVISION)'): configuring for sm_$arch, MPI $mpicxx"
cmake -S "$s" -B "$work/build" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DTEMPI_ENABLE_KAHIP=OFF \
  -DTEMPI_ENABLE_METIS=OFF -DTEMPI_OUTPUT_LEVEL=WARN -DCMAKE_CUDA_ARCHITECTURES="$arch" \
  -DCMAKE_CUDA_COMPILER="$nvcc" -DMPI_C_COMPILER="$mpicc" -DMPI_CXX_COMPILER="$mpicxx" >>"$log" 2>&1 ||
  fail "configuring TEMPI"
cmake --build "$work/build" --target tempi -j "$jobs" >>"$log" 2>&1 || fail "building TEMPI"
libtempi=$work/build/libtempi.so
[ -f "$libtempi" ] || fail "no $libtempi after the build"
say "built libtempi.so in $((SECONDS - t0)) s"

# 3. TEMPI finds the MPI library with dlopen("libmpi.so") in MPI_Init (and crashes when that fails); MPICH's wheel
# ships libmpi.so as a linker script, so give it a directory holding a real link to the libmpi the program loads.
[ -x "$bench" ] || fail "no $bench (build it with meson first)"
[ -f "$libshunt" ] || fail "no $libshunt"
libmpi=$(ldd "$bench" | awk '$1 ~ /^libmpi\.so/ { print $3; exit }')
[ -f "$libmpi" ] || fail "cannot tell which libmpi $bench loads (ldd)"
mkdir -p "$work/mpilib" "$work/cache"
ln -sf "$(readlink -f "$libmpi")" "$work/mpilib/libmpi.so"
say "TEMPI's dlopen(\"libmpi.so\") finds $(readlink -f "$libmpi")"
under() {  # LIB COMMAND...: COMMAND with LIB preloaded, killed after 60 s
  local lib=$1
  shift
  if [ "$lib" = tempi ]; then
    timeout 60 env LD_LIBRARY_PATH="$work/mpilib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
      TEMPI_CACHE_DIR="$work/cache" LD_PRELOAD="$libtempi" "$@"
  else
    timeout 60 env LD_PRELOAD="$libshunt" "$@"
  fi
}

if [ "$build_only" = 1 ]; then
  # Both preloads load into the program, and MPI_Init through each reaches the library (TEMPI's own init needs a
  # GPU, so it is told to pass through); the host mode packs host buffers through each and checks the bytes.
  for lib in tempi shunt; do
    TEMPI_DISABLE=1 under "$lib" "$bench" --host --quick >"$work/$lib-host.csv" 2>>"$log"
    rc=$?
    say "$lib preload, host buffers: exit $rc, $(grep -c ',yes$' "$work/$lib-host.csv") rows ok of" \
      "$(grep -cE '^(vec|halo)/' "$work/$lib-host.csv")"
    [ "$rc" = 0 ] || fail "bench-gpu-mpi-pack --host under the $lib preload"
    under "$lib" "$bench" --quick >>"$log" 2>&1
    rc=$?
    say "$lib preload, device buffers: exit $rc$([ "$rc" = 77 ] && echo ' (no CUDA device here)')"
    [ "$rc" = 0 ] || [ "$rc" = 77 ] || fail "bench-gpu-mpi-pack under the $lib preload"
  done
  say "build-only: done"
  echo "tempi.sh --build-only: libtempi.so built and both preloads ran (see tempi.log)" >"$table"
  exit 0
fi

# 4. Rounds: one TEMPI and one shunt run each, alternating which goes first. A run that dies part way (a crash in
# one case) is resumed after the case it died in, which is marked 'died'.
cases=$(timeout 30 "$bench" --list) || fail "bench-gpu-mpi-pack --list"
ncases=$(echo "$cases" | wc -l)
args=(--trials 20 --time 0.05)
if [ "$host" = 1 ]; then
  args+=(--host)
  export TEMPI_DISABLE=1  # TEMPI's MPI_Init needs a GPU
  say "host buffers, TEMPI_DISABLE=1: a check of this script, not a comparison"
fi
raw="$work/raw"
rm -rf "$raw" && mkdir -p "$raw"
one_run() {  # LIB ROUND: appends rows to $raw/LIB.csv, 'died' rows for cases a crash took
  local lib=$1 r=$2 left=$cases rc attempt=0 got dead
  while [ -n "$left" ] && [ $attempt -lt 4 ]; do
    attempt=$((attempt + 1))
    local filter
    filter=$(echo "$left" | sed 's/.*/^&$/' | paste -sd, -)
    echo "== $lib round $r attempt $attempt" >>"$log"
    under "$lib" "$bench" "${args[@]}" --cases "$filter" >"$raw/out" 2>>"$log"
    rc=$?
    grep -E '^(vec|halo)/' "$raw/out" | sed "s|^|$r,|" >>"$raw/$lib.csv"
    got=$(grep -E '^(vec|halo)/' "$raw/out" | cut -d, -f1)
    left=$(comm -23 <(echo "$left" | sort) <(echo "$got" | sort) | grep . || true)
    left=$(echo "$cases" | grep -Fxf <(echo "$left") || true)
    [ -z "$left" ] && break
    if [ "$rc" = 0 ] || [ "$rc" = 1 ]; then break; fi
    if ! grep -q '^case,' "$raw/out"; then
      say "$lib round $r: exit $rc before the first case"
      break
    fi
    dead=$(echo "$left" | head -1)
    say "$lib round $r: exit $rc in $dead"
    echo "$r,$dead,0,0,0,died" >>"$raw/$lib.csv"
    left=$(echo "$left" | tail -n +2)
  done
  echo "== $lib round $r: exit $rc" >>"$log"
}
for ((r = 1; r <= rounds; r++)); do
  if [ $r -gt 1 ] && [ $((SECONDS - start)) -ge "$budget" ]; then
    say "budget of $budget s spent: $((r - 1)) rounds"
    break
  fi
  if [ $((r % 2)) = 1 ]; then order="tempi shunt"; else order="shunt tempi"; fi
  for lib in $order; do one_run "$lib" "$r"; done
  say "round $r done ($order)"
done
touch "$raw/tempi.csv" "$raw/shunt.csv"
for lib in tempi shunt; do
  grep -q 'MPI_Pack is from' "$log" && grep -m1 "MPI_Pack is from.*lib$lib" "$log" >/dev/null ||
    say "WARNING: no run said that MPI_Pack came from lib$lib"
done

# 5. Merge: best time per case and library over the rounds; a case is ok only if every round said so.
{
  echo "MPI_Pack of device buffers by one unmodified program (bench-gpu-mpi-pack), TEMPI and shunt preloaded in turn"
  echo "device: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1);" \
    "$(nvcc --version | tail -1); MPI: $(readlink -f "$libmpi"); TEMPI $(cat "$s/REVISION" 2>/dev/null)"
  echo "rounds: $((r - 1)), each case best of up to ${args[1]} calls (${args[3]} s per case) per run; GB/s of payload"
  [ "$host" = 1 ] && echo "HOST BUFFERS (--host): the TEMPI column is the MPI library's MPI_Pack, TEMPI passing through"
  awk -F, -v n="$ncases" '
    FNR == 1 { lib = (FILENAME ~ /tempi\.csv$/) ? "t" : "s" }
    {
      c = $2
      if (!(c in seen)) { seen[c] = ++k; order[k] = c }
      if ($3 > 0) pay[c] = $3
      key = lib SUBSEP c
      if ($4 > 0 && (!(key in best) || $4 < best[key])) best[key] = $4
      if (!(key in ok)) ok[key] = $6
      else if ($6 != "yes") ok[key] = $6
    }
    END {
      printf "%-22s %10s %11s %11s %11s %8s %8s\n", "case", "payload", "TEMPI GB/s", "shunt GB/s", "shunt/TEMPI",
             "TEMPI ok", "shunt ok"
      for (i = 1; i <= k; i++) {
        c = order[i]; t = ("t" SUBSEP c); s = ("s" SUBSEP c)
        tg = (t in best) ? pay[c] / best[t] / 1e9 : 0
        sg = (s in best) ? pay[c] / best[s] / 1e9 : 0
        ratio = (tg > 0 && sg > 0) ? sg / tg : 0
        okt = (t in ok) ? ok[t] : "-"
        oks = (s in ok) ? ok[s] : "-"
        if (ratio > 0 && okt == "yes" && oks == "yes") { logsum += log(ratio); m++; if (ratio > 1) ahead++ }
        tc = (tg > 0) ? sprintf("%.1f", tg) : "-"
        sc = (sg > 0) ? sprintf("%.1f", sg) : "-"
        rc = (ratio > 0) ? sprintf("%.2fx", ratio) : "-"
        printf "%-22s %10d %11s %11s %11s %8s %8s\n", c, pay[c], tc, sc, rc, okt, oks
      }
      if (m > 0)
        printf "geometric mean shunt/TEMPI over the %d of %d cases both packed right: %.2fx; shunt ahead on %d\n",
               m, n, exp(logsum / m), ahead
      else
        print "no case has both columns"
    }' "$raw/tempi.csv" "$raw/shunt.csv"
} >"$table"
cat "$table"
say "done in $((SECONDS - start)) s"
