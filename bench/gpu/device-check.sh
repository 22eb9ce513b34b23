#!/usr/bin/env bash
# bench/gpu/device-check.sh: the whole GPU check in one command, on a bare GPU machine with nvcc and PyTorch (with NCCL):
# installs what bench/gpu/prepare-device.sh put in .device/, builds what the checks need of shunt (CUDA, NCCL, MPICH from
# PyPI), then, in this order: the gpu suite (kernels against the host packer, device buffers through MPI, the CUDA
# compressors with their throughput, MPI sums of device buffers compressed on the GPU, real NCCL under the preload,
# ncclAllReduce's device compression path on the CPU double of NCCL with 2-6 ranks sharing the GPU, quick benchmarks)
# beside compute-sanitizer's memcheck, racecheck and synccheck on the suite's programs; shunt-measure's device tables
# with --validate and --decisions; real NCCL at one rank under the preload and with the tuner plugin; last, in what
# time is left, bench-gpu-pack (every row against the kernels before the fast path and the sector bound) and the
# MPI_Pack comparison with TEMPI where .device/tempi is there. Writes OUT/summary.txt and OUT/logs.tgz (every log).
# Each step's limit shrinks to the time left of DEVICE_CHECK_SECONDS (default 450: the run ends within 8 minutes),
# and a step with no time left is skipped and said so.
#   usage: bench/gpu/device-check.sh [OUT]
#   DEVICE_CHECK_ONLY=pack: build, bench-gpu-pack, TEMPI's comparison and gpu_pack only;
#   DEVICE_CHECK_BUILD_ONLY=1: install and build only (how the script is tried without a GPU)
#   DEVICE_CHECK_SHAPES=1: bench-gpu-pack also times each fast-path kernel shape (for choosing the default)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-${OUT:-./device-out}}
mkdir -p "$out"
start=$SECONDS
summary="$out/summary.txt"
logs="$out/logs"
mkdir -p "$logs"
: >"$summary"
# Each note also refreshes OUT/logs.tgz, so a run stopped from outside still brings its logs back.
note() {
  printf '[%4ds] %s\n' "$((SECONDS - start))" "$*" | tee -a "$summary"
  tar -C "$out" -czf "$out/logs.tgz.new" logs 2>/dev/null && mv "$out/logs.tgz.new" "$out/logs.tgz"
}

# The whole run's budget (DEVICE_CHECK_SECONDS, default 450 s from the start): within MAX gives a step MAX seconds or
# what is left less 20 s for the end, 0 when under 15 s would be left (the step is then skipped, and said so).
deadline=${DEVICE_CHECK_SECONDS:-450}
within() {
  local l=$((deadline - (SECONDS - start) - 20))
  [ "$l" -gt "$1" ] && l=$1
  [ "$l" -lt 15 ] && l=0
  echo "$l"
}

# 1. What .device/ brings: wheels into /tmp (mpich with its data files under a prefix), packages unpacked under /tmp/deb.
root=/tmp/shunt-dev
rm -rf "$root" && mkdir -p "$root/deb"
python3 -m pip install -q --no-index --no-deps --no-compile --target "$root/site" .device/whl/meson-*.whl \
  .device/whl/ninja-*.whl && python3 -m pip install -q --no-index --no-deps --no-compile --prefix "$root/py" \
  .device/whl/mpich-*.whl || { note "FAILED: installing the wheels"; exit 1; }
for f in .device/deb/*.deb; do dpkg -x "$f" "$root/deb"; done
export PYTHONPATH="$root/site${PYTHONPATH:+:$PYTHONPATH}"
export PATH="$PATH:/usr/local/cuda/bin:/usr/local/cuda/compute-sanitizer"
export PATH="$root/site/bin:$root/py/bin:$root/deb/usr/bin:$PATH"
export LD_LIBRARY_PATH="$root/py/lib:$root/py/lib/mpich:$root/deb/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
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
Libs: -L$root/py/lib -lmpi -Wl,-rpath,$root/py/lib -Wl,-rpath-link,$root/py/lib/mpich
PC
export PKG_CONFIG_LIBDIR="$pc"
# libmpi.so.12 finds libfabric and UCX in lib/mpich by its RUNPATH ($ORIGIN/mpich), which ld does not follow at link
# time: links beside libmpi, and mpich.pc's -rpath-link. Not in LDFLAGS: meson 1.12 hands LDFLAGS to nvcc unchanged
# when nvcc links (libshunt.so), and nvcc rejects -Wl options.
for f in "$root"/py/lib/mpich/*.so*; do ln -sf "$f" "$root/py/lib/$(basename "$f")"; done
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
# Appended: the system directory PyTorch's NCCL may sit in can hold an older libfabric than libmpi's own.
export LD_LIBRARY_PATH="$LD_LIBRARY_PATH:$(dirname "$so")"
note "NCCL from $nccl ($so); nvcc $(nvcc --version | tail -1); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null)"

# 2. Build: MPICH, CUDA and NCCL; only the targets the checks run (the gpu suite's programs and what they load).
build=build-device
cc=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null | head -1 | tr -d ' .')
if meson setup $([ -d "$build" ] && echo --reconfigure) "$build" -Dmpi=mpich -Dcuda=enabled -Dnccl=enabled -Dnccl_home="$root/nccl" \
     -Dbuildtype=release >"$logs/build.log" 2>&1; then
  targets=$(meson introspect "$build" --tests | python3 -c '
import json, os, sys
b = os.path.realpath(sys.argv[1]); out = set()
for t in json.load(sys.stdin):
    if "gpu" not in t["suite"] and not any(s.endswith(":gpu") for s in t["suite"]): continue
    for a in t["cmd"] + [e.split("=", 1)[-1] for e in t["cmd"]]:
        p = os.path.realpath(a if os.path.isabs(a) else os.path.join(b, a))
        if p.startswith(b + "/") and not os.path.basename(a).startswith("-"): out.add(os.path.relpath(p, b))
print(" ".join(sorted(out)))' "$build")
  targets="$targets src/shunt-measure src/shunt-info interpose/libshunt.so interpose/libshunt-nccl-tuner.so \
    bench/gpu/bench-gpu-pack bench/gpu/bench-gpu-mpi-pack tests/nccl/nccl-ops-device"
  known=$(ninja -C "$build" -t targets all 2>/dev/null | cut -d: -f1)
  want=$(for t in $targets; do grep -qxF -e "$t" <<<"$known" && echo "$t"; done | sort -u | tr '\n' ' ')
  echo "targets: $want" >>"$logs/build.log"
fi
if [ -n "${want:-}" ] && ninja -C "$build" $want >>"$logs/build.log" 2>&1; then
  note "built in $((SECONDS - start)) s (GPU compute capability ${cc:-unknown})"
else
  note "FAILED: the build (build.log)"; tail -30 "$logs/build.log"; tar -C "$out" -czf "$out/logs.tgz" logs; exit 1
fi
# DEVICE_CHECK_BUILD_ONLY=1: stop here (how the install and build steps are tried on a machine without a GPU).
if [ -n "${DEVICE_CHECK_BUILD_ONLY:-}" ]; then note "build only: done"; exit 0; fi
# The pack kernels' steps (run last, in what time is left, except with DEVICE_CHECK_ONLY=pack):
# bench-gpu-pack alone on the GPU: every row, the kernels before the fast path (DEVICE_CHECK_SHAPES=1: every fast-path
# shape too, longer, and the 32 B rows again with the L2 fetch granularity at 32 bytes, a device-wide limit set inside
# that run only); then MPI_Pack of device buffers by one unmodified program, shunt against TEMPI (built here from
# .device/tempi), interleaved processes (tempi.txt, tempi.log).
pack_steps() {
  local t
  t=$(within 220)
  if [ "$t" -gt 0 ]; then
    timeout "$t" "$build/bench/gpu/bench-gpu-pack" ${DEVICE_CHECK_SHAPES:+--shapes} --time 0.4 --csv "$logs/pack.csv" \
      >"$logs/pack.txt" 2>&1
    note "bench-gpu-pack: exit $? ($(grep -c '^pack\|^unpack' "$logs/pack.txt") rows, limit ${t} s)"
    # The staged kernels against the default on the rows of 1-4 B blocks (what choosing them as the default needs).
    python3 - "$logs/pack.csv" <<'PY' 2>&1 | sed 's/^/  /' | tee -a "$summary"
import csv, sys
try:
    rows = [r for r in csv.DictReader(open(sys.argv[1])) if r.get("staged_gbs") not in (None, "", "-")]
except OSError:
    rows = []
for op in ("pack", "unpack"):
    got = [(r["row"], float(r["staged_gbs"]) / float(r["shunt_gbs"]), float(r["staged_over_bound"]),
            float(r["shunt_over_bound"])) for r in rows if r["row"].startswith(op + "/") and float(r["shunt_gbs"]) > 0]
    if not got:
        print(f"staged {op}s: no rows"); continue
    x = [g[1] for g in got]
    print(f"staged {op}s: {sum(v > 1 for v in x)} of {len(x)} rows faster than the default, staged/default "
          f"{min(x):.2f}-{max(x):.2f}; of the bound {min(g[2] for g in got):.2f}-{max(g[2] for g in got):.2f} "
          f"(default {min(g[3] for g in got):.2f}-{max(g[3] for g in got):.2f})")
    for name, ratio, sb, db in got:
        print(f"  {name}: staged/default {ratio:.2f}, of the bound {sb:.2f} against {db:.2f}")
PY
  else
    note "bench-gpu-pack: skipped (no time left)"
  fi
  if [ -n "${DEVICE_CHECK_SHAPES:-}" ] && t=$(within 60) && [ "$t" -gt 0 ]; then
    timeout "$t" "$build/bench/gpu/bench-gpu-pack" --blocks 32 --l2-fetch 32 --time 0.5 >"$logs/pack-l2fetch32.txt" 2>&1
    note "bench-gpu-pack --blocks 32 --l2-fetch 32: exit $? ($(grep -m1 -o 'set to 32.*ms' "$logs/pack-l2fetch32.txt"))"
  fi
  if [ ! -d .device/tempi ]; then
    note "TEMPI: no .device/tempi (bench/gpu/prepare-device.sh with the TEMPI mirror)"
  elif t=$(within 120) && [ "$t" -gt 30 ]; then
    timeout "$t" bench/gpu/tempi.sh --build "$build" --rounds 3 --budget $((t / 2)) .device/tempi "$logs" >/dev/null 2>&1
    note "TEMPI against shunt (tempi.txt): exit $?; $(grep -m1 -E '^(geometric|no case|tempi.sh)' "$logs/tempi.txt")"
  else
    note "TEMPI against shunt: skipped (no time left)"
  fi
}

# DEVICE_CHECK_ONLY=pack: the pack kernels alone (the steps above and gpu_pack against the host packer), then stop.
if [ "${DEVICE_CHECK_ONLY:-}" = pack ]; then
  pack_steps
  timeout "$(within 200)" "$build/tests/gpu/gpu_pack" >"$logs/gpu_pack.log" 2>&1
  note "gpu_pack: exit $? ($(tail -1 "$logs/gpu_pack.log"))"
  note "done in $((SECONDS - start)) s"
  tar -C "$out" -czf "$out/logs.tgz" logs && rm -rf "$logs"
  exit 0
fi

# 5. The gpu suite, and compute-sanitizer's three tools on the suite's programs beside it (short cases). The suite
# includes compress_nccl_device_np2/np4 (tests/nccl: compress-nccl --device, whose double is built with it).
timeout "$(within 240)" meson test -C "$build" --suite gpu --no-rebuild --num-processes 1 --print-errorlogs >/dev/null 2>&1 &
suite_pid=$!
san() {  # tool name command...: one sanitized run, its verdict in sanitizer.log
  local tool=$1 name=$2; shift 2
  local f="$logs/san-$tool-$name.log" rc verdict
  timeout 100 compute-sanitizer --tool "$tool" --error-exitcode 9 "$@" >"$f" 2>&1
  rc=$?
  # memcheck and synccheck end each process with "ERROR SUMMARY: N errors", racecheck with "(N errors, M warnings)".
  verdict=clean
  { [ "$rc" != 0 ] || ! grep -q 'SUMMARY' "$f" || grep 'SUMMARY' "$f" | grep -qvE 'SUMMARY: 0 errors|\(0 errors'; } &&
    verdict=NOT-CLEAN
  echo "$tool $name: $verdict, exit $rc, $(grep -c SUMMARY "$f") summaries: $(grep -m1 SUMMARY "$f")" >>"$logs/sanitizer.log"
}
if command -v compute-sanitizer >/dev/null; then
  : >"$logs/sanitizer.log"
  pre="$PWD/$build/interpose/libshunt.so"
  for tool in memcheck racecheck synccheck; do
    (san $tool gpu_classify "$build/tests/gpu/gpu_classify"
     san $tool gpu_pack "$build/tests/gpu/gpu_pack" 60 --objects 65536
     san $tool gpu_compress "$build/tests/gpu/gpu_compress" --no-timing
     san $tool gpu_p2p mpiexec -n 2 env LD_PRELOAD="$pre" SHUNT_PACK=device "$build/tests/gpu/gpu_p2p"
     san $tool gpu_alltoallw mpiexec -n 3 env LD_PRELOAD="$pre" SHUNT_PACK=device "$build/tests/gpu/gpu_alltoallw") &
  done
  # At most 150 s for the sanitizers (each run also stops at 100 s): what is still running then is stopped.
  for _ in $(seq 75); do [ -n "$(jobs -p | grep -v "^$suite_pid\$")" ] || break; sleep 2; done
  pkill -f compute-sanitizer 2>/dev/null
  wait $(jobs -p | grep -v "^$suite_pid\$") 2>/dev/null
  note "compute-sanitizer: $(grep -c ': clean,' "$logs/sanitizer.log") of $(wc -l <"$logs/sanitizer.log") runs clean"
  grep -v ': clean,' "$logs/sanitizer.log" | sed 's/^/  /' | tee -a "$summary"
else
  note "compute-sanitizer not found"
fi
wait "$suite_pid"
cp "$build/meson-logs/testlog.txt" "$logs/gpu-suite.log"
note "gpu suite: $(grep -E '^(Ok|Fail|Skipped|Timeout|Expected Fail|Unexpected Pass):' "$logs/gpu-suite.log" | tr -s ' ' | tr '\n' ' ')"
grep -E '^ *[0-9]+/[0-9]+ .*(FAIL|TIMEOUT|SKIP)' "$build/meson-logs/testlog.txt" | sed 's/^/  /' | tee -a "$summary"
grep -h -E '^gpu_pack on|^gpu_compress' "$logs/gpu-suite.log" | head -3 | sed 's/^/  /' | tee -a "$summary"
# The CUDA compressors' throughput against the device's copy (gpu_compress), and the MPI sums of device buffers
# (gpu_compress_mpi: the device and host places).
grep -h -E '^device .*copy of|^method +stage|^(fp16|bf16|int8|int4|randomk|topk|sign) +(encode|decode|combine) |^throughput goal' \
  "$logs/gpu-suite.log" | sed 's/^/  /' | tee -a "$summary"
grep -h -E '^(ok|FAIL): gpu_compress_mpi' "$logs/gpu-suite.log" | cut -c1-240 | head -8 |
  sed 's/^/  /' | tee -a "$summary"
# ncclAllReduce's device compression path (device buffers on the double, run_compress_nccl.py --device): each test's
# result and duration, the cases passed, the first failures.
note "compress_nccl device buffers: $(awk '/^test: .*compress_nccl_device_np/ {name=$NF} name && /^duration:/ {d=$2}
  name && /^result:/ {sub(/^result: */, ""); printf "%s%s %s (%s)", sep, name, $0, d; sep="; "; name=""}' \
  "$logs/gpu-suite.log"); $(grep -c '^ok: compress-nccl --device' "$logs/gpu-suite.log") cases ok"
grep -m2 -h '^FAIL: compress-nccl --device' "$logs/gpu-suite.log" | cut -c1-300 | sed 's/^/  /' | tee -a "$summary"

# 6. The device tables of the cost model, then their prediction error on held-out sizes and the pack decisions.
{
  m=(--only copy. --only launch --only pack.device --only pack.mapped --output "$logs/model-device.json")
  timeout "$(within 60)" mpiexec -n 1 "$build/src/shunt-measure" "${m[@]}" --budget 20; echo "exit $?"
  timeout "$(within 60)" mpiexec -n 1 "$build/src/shunt-measure" "${m[@]}" --validate --decisions; echo "exit $?"
} >"$logs/measure.log" 2>&1
note "shunt-measure device tables: $(grep -c '^exit 0' "$logs/measure.log") of 2 runs exit 0"

# 7. Real NCCL at one rank under the preload (every intercepted call, results checked), then with the tuner plugin.
{
  echo "== nccl-ops-device under the preload, SHUNT_REPORT=rank"
  LD_PRELOAD="$PWD/$build/interpose/libshunt.so" SHUNT_REPORT=rank timeout "$(within 60)" "$build/tests/nccl/nccl-ops-device"
  echo "exit $?"
  tuner=$(find "$build" -name 'libshunt-nccl-tuner.so' | head -1)
  if [ -n "$tuner" ]; then
    echo "== the same with NCCL_TUNER_PLUGIN=$tuner NCCL_DEBUG=INFO SHUNT_LOG=decide"
    LD_PRELOAD="$PWD/$build/interpose/libshunt.so" NCCL_TUNER_PLUGIN="$PWD/$tuner" NCCL_DEBUG=INFO \
      NCCL_DEBUG_SUBSYS=INIT,TUNING SHUNT_LOG=decide timeout "$(within 60)" "$build/tests/nccl/nccl-ops-device"
    echo "exit $?"
  else
    echo "== no tuner plugin built"
  fi
  # shunt-measure --nccl with real NCCL: one rank per GPU, the GPUs of this machine as two nodes (SHUNT_TOPOLOGY);
  # with fewer than 4 GPUs it has no two nodes of 2 ranks and exits 77, saying why.
  gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  ranks=$(( gpus >= 4 ? gpus / 2 * 2 : 1 ))
  echo "== shunt-measure --nccl at $ranks rank(s) of $gpus GPU(s), SHUNT_TOPOLOGY=node=$(( ranks >= 4 ? ranks / 2 : 1 ))"
  SHUNT_TOPOLOGY=node=$(( ranks >= 4 ? ranks / 2 : 1 )) timeout "$(within 120)" mpiexec -n "$ranks" "$build/src/shunt-measure" \
    --nccl --nccl-library "$so" --output "$logs/model-nccl.json" --budget 60
  echo "exit $?"
} >"$logs/nccl.log" 2>&1
note "shunt-measure --nccl: $(grep -A3 '^== shunt-measure --nccl' "$logs/nccl.log" | grep -m1 -E 'shunt-measure: |exit' || echo 'no line (nccl.log)')"
note "real NCCL under the preload: $(grep -m1 'NCCL results checked' "$logs/nccl.log" || echo 'no result line (nccl.log)'); tuner lines: $(grep -ci 'tuner' "$logs/nccl.log")"

# 8. The pack kernels' benchmarks and TEMPI's comparison, in what time is left.
pack_steps
note "done in $((SECONDS - start)) s"
tar -C "$out" -czf "$out/logs.tgz" logs && rm -rf "$logs"
