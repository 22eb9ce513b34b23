#!/usr/bin/env python3
"""tests/gpu/run_gpu_compress_mpi.py: gradient compression of float device buffers under the preload on an
MPI that is not CUDA-aware (gpu_compress_mpi.cpp: a 64 MiB gradient and a one-float loss per step, checked
against the program's own sums in double), 4 ranks on the GPUs there are (one is enough).

  run_gpu_compress_mpi.py --mpiexec M [--mpiexec-arg A]... --flavour F --lib L PROGRAM

Each run has the built-in model (an empty cache directory) and these expectations:
- no SHUNT_COMPRESS: every sum within float rounding of the exact one, no compression line;
- SHUNT_COMPRESS=int8 on nodes of one rank (SHUNT_TOPOLOGY=node=1, every option flat): the plan puts
  the gradient on the device place, int8 allgather of compressed parts (the CUDA compressors; only the
  compressed forms cross host memory), the loss exact; within int8's bound; at least 9 calls compressed
  on every rank (12 steps, 3 exact while the pattern is found and 3 of warm-up), no fallback;
- SHUNT_COMPRESS=fp16, the same shape: fp16 device allreduce of the summable form, within fp16's bound;
- int8 with a NaN at step 8 on rank 1: that call exact (the NaN where it was), one warning, one fallback
  on every rank;
- int8 with SHUNT_COMPRESS_CHECK=2: shadow lines of every second compressed call within the bound;
- SHUNT_COMPRESS=auto on nodes of 2 (SHUNT_TOPOLOGY=node=2): the hierarchical host option wins there
  (the device place has flat schemes only): int8 host allgather, hierarchical, on the staged buffers,
  within the bound.
Exit status: 0 pass, 1 fail, 77 skipped (no CUDA device).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

TIMEOUT = 600
RANKS = 4
STEPS = 12


def fail(what, p=None):
    print(f"FAIL: {what}", file=sys.stderr)
    if p is not None:
        print(f"  exit {p.returncode}\n  stdout:\n{p.stdout}\n  stderr:\n{p.stderr[-6000:]}", file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--mpiexec-arg", action="append", default=[])
    ap.add_argument("--flavour", choices=["openmpi", "mpich"], required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("program")
    args = ap.parse_args()

    probe = subprocess.run([args.program, "probe"], capture_output=True, text=True, timeout=120)
    if probe.returncode == 77:
        print("skipped: no CUDA device")
        sys.exit(77)
    if probe.returncode != 0:
        fail("gpu_compress_mpi probe", probe)

    cache = tempfile.mkdtemp(prefix="shunt-gpu-compress-test-")
    base = {k: v for k, v in os.environ.items() if not k.startswith("SHUNT_") and k != "LD_PRELOAD"}
    base["XDG_CACHE_HOME"] = cache

    def run(program_args, **shunt):
        cmd = [args.mpiexec] + args.mpiexec_arg + ["-n", str(RANKS)]
        cmd += ["-x", "LD_PRELOAD=" + args.lib] if args.flavour == "openmpi" else ["-genv", "LD_PRELOAD", args.lib]
        env = dict(base, SHUNT_REPORT="rank", **{"SHUNT_" + k.upper(): str(v) for k, v in shunt.items()})
        what = f"gpu_compress_mpi {' '.join(program_args)} with {shunt}"
        try:
            p = subprocess.run(cmd + [args.program] + program_args, capture_output=True, text=True, env=env,
                               timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            fail(f"{what}: timed out after {TIMEOUT} s")
        if p.returncode != 0:
            fail(what + ": exit status", p)
        return p, what

    def counts_of(p, what):
        counts = [int(m) for m in re.findall(r"compression: (\d+) calls compressed", p.stderr)]
        if len(counts) != RANKS:
            fail(f"{what}: {len(counts)} compression report lines, expected {RANKS}", p)
        return counts

    def planned(p, what):
        positions = re.findall(r"position \d+: MPI_Allreduce of (\d+) floats -> ([^(]+?) \(", p.stderr)
        if not positions:
            fail(f"{what}: no plan in the decide log", p)
        return {int(n): o for n, o in positions}

    steps = str(STEPS)
    p, what = run([steps, "0"])
    if "compression:" in p.stderr:
        fail(f"{what}: a compression line without consent", p)
    print(f"ok: {what}: exact")

    for method, want, bound in (("int8", "int8 device allgather", "2e-2"), ("fp16", "fp16 device allreduce", "2e-3")):
        p, what = run([steps, bound], compress=method, topology="node=1", log="decide")
        plan = planned(p, what)
        if plan.get(1 << 24) != want or plan.get(1) != "exact":
            fail(f"{what}: planned {plan}, expected the gradient {want} and the loss exact", p)
        counts = counts_of(p, what)
        if min(counts) < STEPS - 3 or len(set(counts)) != 1:
            fail(f"{what}: compressed calls per rank {counts}, expected at least {STEPS - 3} and equal", p)
        if re.search(r"[1-9]\d* non-finite fallbacks", p.stderr):
            fail(f"{what}: a fallback without NaN", p)
        print(f"ok: {what}: {want}, {counts[0]} calls compressed per rank; {p.stdout.strip()}")

    p, what = run([steps, "2e-2", "8"], compress="int8", topology="node=1")
    if len(re.findall(r"NaN or Inf in a compressed reduction", p.stderr)) != 1:
        fail(f"{what}: expected one warning", p)
    if len(re.findall(r" 1 non-finite fallbacks", p.stderr)) != RANKS:
        fail(f"{what}: expected one fallback on every rank", p)
    print(f"ok: {what}: the NaN call exact, one warning")

    p, what = run([steps, "2e-2"], compress="int8", topology="node=1", compress_check="2", log="decide")
    errors = [float(e) for e in re.findall(r"compression check: .*relative error ([0-9.e+-]+)", p.stderr)]
    if len(errors) < (STEPS - 3) // 2 or max(errors) > 2e-2:
        fail(f"{what}: shadow errors {errors}", p)
    print(f"ok: {what}: {len(errors)} shadow checks, largest relative error {max(errors):.3g}")

    p, what = run([steps, "2e-2"], compress="auto", topology="node=2", log="decide")
    plan = planned(p, what)
    if plan.get(1 << 24) != "int8 host allgather, hierarchical":
        fail(f"{what}: planned {plan}, expected the hierarchical host int8 allgather", p)
    if min(counts_of(p, what)) < STEPS - 3:
        fail(f"{what}: too few calls compressed", p)
    print(f"ok: {what}: the host place on staged device buffers; {p.stdout.strip()}")


if __name__ == "__main__":
    main()
