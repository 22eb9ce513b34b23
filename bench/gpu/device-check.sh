#!/usr/bin/env bash
# bench/gpu/device-check.sh: the whole GPU check in one command, on a bare GPU machine with nvcc and PyTorch (with NCCL):
# installs what bench/gpu/prepare-device.sh put in .device/, builds shunt with CUDA and NCCL (MPICH from PyPI), runs the
# gpu suite (kernels against the host packer, device buffers through MPI, the CUDA compressors, real NCCL at one rank
# under the preload with every intercepted call checked, the GPU benchmarks in quick mode), compute-sanitizer memcheck
# on a short case, NCCL with shunt's tuner plugin where it is built, and shunt-measure --nccl where 4 GPUs or more make
# two nodes (else its exit 77). Writes at most 6 files to OUT (default ./device-out): build.log, gpu-suite.log,
# sanitizer.log, nccl.log, summary.txt, model-nccl.json (where measured). Meant to end within 8 minutes.
#   usage: bench/gpu/device-check.sh [OUT]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-${OUT:-./device-out}}
mkdir -p "$out"
start=$SECONDS
summary="$out/summary.txt"
: >"$summary"
note() { printf '[%4ds] %s\n' "$((SECONDS - start))" "$*" | tee -a "$summary"; }

# 1. What .device/ brings: wheels into /tmp (mpich with its data files under a prefix), packages unpacked under /tmp/deb.
root=/tmp/shunt-dev
rm -rf "$root" && mkdir -p "$root/deb"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$root/site" .device/whl/meson-*.whl \
  .device/whl/ninja-*.whl && python3 -m pip install -q --no-index --no-deps --no-compile --prefix "$root/py" \
  .device/whl/mpich-*.whl || { note "FAILED: installing the wheels"; exit 1; }
for f in .device/deb/*.deb; do dpkg -x "$f" "$root/deb"; done
export PYTHONPATH="$root/site${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$root/site/bin:$root/py/bin:$root/deb/usr/bin:$PATH"
export LD_LIBRARY_PATH="$root/py/lib:$root/deb/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
pc="$root/pkgconfig"
mkdir -p "$pc"
for f in "$root"/deb/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc "$root"/deb/usr/share/pkgconfig/*.pc; do
  [ -f "$f" ] && sed "s|=/usr|=$root/deb/usr|g" "$f" >"$pc/$(basename "$f")"
done
cat >"$pc/mpich.pc" <<PC
Name: mpich
Description: MPICH from PyPI's wheel
Version: 5.0.2
Cflags: -I$root/py/include
Libs: -L$root/py/lib -lmpi -Wl,-rpath,$root/py/lib
PC
export PKG_CONFIG_LIBDIR="$pc"
command -v pkg-config >/dev/null || ln -sf "$root/deb/usr/bin/pkgconf" "$root/site/bin/pkg-config"
# NCCL: PyTorch's (headers and library), as -Dnccl_home wants it.
nccl=$(python3 -c 'import nvidia.nccl, os; print(os.path.dirname(nvidia.nccl.__file__))' 2>/dev/null)
if [ -z "$nccl" ] || [ ! -f "$nccl/include/nccl.h" ]; then
  for d in /usr/local/cuda /usr; do [ -f "$d/include/nccl.h" ] && nccl=$d && break; done
fi
mkdir -p "$root/nccl/lib"
ln -sfn "$nccl/include" "$root/nccl/include"
so=$(ls "$nccl"/lib/libnccl.so* "$nccl"/lib/x86_64-linux-gnu/libnccl.so* 2>/dev/null | head -1)
ln -sf "$so" "$root/nccl/lib/libnccl.so"
export LD_LIBRARY_PATH="$(dirname "$so"):$LD_LIBRARY_PATH"
note "NCCL from $nccl ($so); nvcc $(nvcc --version | tail -1); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"

# 2. Build: MPICH, CUDA and NCCL.
build=build-device
if meson setup "$build" -Dmpi=mpich -Dcuda=enabled -Dnccl=enabled -Dnccl_home="$root/nccl" \
     -Dbuildtype=release >"$out/build.log" 2>&1 && meson compile -C "$build" >>"$out/build.log" 2>&1; then
  note "built in $((SECONDS - start)) s"
else
  note "FAILED: the build (build.log)"; tail -30 "$out/build.log"; exit 1
fi

# 3. The gpu suite: kernels, device buffers through MPI, compressors, real NCCL under the preload, quick benchmarks.
meson test -C "$build" --suite gpu --num-processes 1 --print-errorlogs >/dev/null 2>&1
cp "$build/meson-logs/testlog.txt" "$out/gpu-suite.log"
note "gpu suite: $(grep -E '^(Ok|Fail|Skipped|Timeout):' "$build/meson-logs/testlog.txt" | tr -s ' ' | tr '\n' ' ')"

# 4. compute-sanitizer memcheck on a short case (pointer classification and the pack kernels' smallest cases).
if command -v compute-sanitizer >/dev/null; then
  timeout 180 compute-sanitizer --tool memcheck --error-exitcode 9 "$build/tests/gpu/gpu_classify" >"$out/sanitizer.log" 2>&1
  note "compute-sanitizer memcheck gpu_classify: exit $? ($(grep -c 'ERROR SUMMARY: 0 errors' "$out/sanitizer.log") clean summaries)"
else
  note "compute-sanitizer not found"
fi

# 5. Real NCCL at one rank under the preload (every intercepted call, results checked), then with the tuner plugin.
{
  echo "== nccl-ops-device under the preload, SHUNT_REPORT=rank"
  LD_PRELOAD="$PWD/$build/interpose/libshunt.so" SHUNT_REPORT=rank timeout 120 "$build/tests/nccl/nccl-ops-device"
  echo "exit $?"
  tuner=$(find "$build" -name 'libshunt-nccl-tuner.so' | head -1)
  if [ -n "$tuner" ]; then
    echo "== the same with NCCL_TUNER_PLUGIN=$tuner NCCL_DEBUG=INFO SHUNT_LOG=decide"
    LD_PRELOAD="$PWD/$build/interpose/libshunt.so" NCCL_TUNER_PLUGIN="$PWD/$tuner" NCCL_DEBUG=INFO \
      NCCL_DEBUG_SUBSYS=INIT,TUNING SHUNT_LOG=decide timeout 120 "$build/tests/nccl/nccl-ops-device"
    echo "exit $?"
  else
    echo "== no tuner plugin built"
  fi
  # shunt-measure --nccl with real NCCL: one rank per GPU, the GPUs of this machine as two nodes (SHUNT_TOPOLOGY);
  # with fewer than 4 GPUs it has no two nodes of 2 ranks and exits 77, saying why.
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  ranks=$(( gpus >= 4 ? gpus / 2 * 2 : 1 ))
  echo "== shunt-measure --nccl at $ranks rank(s) of $gpus GPU(s), SHUNT_TOPOLOGY=node=$(( ranks >= 4 ? ranks / 2 : 1 ))"
  SHUNT_TOPOLOGY=node=$(( ranks >= 4 ? ranks / 2 : 1 )) timeout 120 mpiexec -n "$ranks" "$build/src/shunt-measure" \
    --nccl --nccl-library "$so" --output "$out/model-nccl.json" --budget 60
  echo "exit $?"
} >"$out/nccl.log" 2>&1
note "shunt-measure --nccl: $(grep -A3 '^== shunt-measure --nccl' "$out/nccl.log" | grep -m1 -E 'shunt-measure: |exit' || echo 'no line (nccl.log)')"
note "real NCCL under the preload: $(grep -m1 'NCCL results checked' "$out/nccl.log" || echo 'no result line (nccl.log)'); tuner lines: $(grep -ci 'tuner' "$out/nccl.log")"
note "done in $((SECONDS - start)) s"
