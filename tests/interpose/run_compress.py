#!/usr/bin/env python3
"""tests/interpose/run_compress.py: gradient compression under the preload, on compress_sums.c (a plain MPI
program checking every float sum against the library's PMPI_ call) and compress_control (the header API).

  run_compress.py --mpiexec M [--mpiexec-arg A]... --flavour F --lib L --sums PROGRAM --half PROGRAM
                  --control PROGRAM --shunt-info I

Each run has the built-in model (an empty cache directory) and these expectations:
- shunt-info --explain compress: a 64 MiB sum on 2 nodes of 2 ranks chooses int8 (hierarchical allgather),
  on one node of 4 it stays exact; on nodes of one rank with int8 allowed, device buffers (on an MPI that
  is not CUDA-aware) take the device place (int8 device allgather), host buffers stay exact;
- no SHUNT_COMPRESS, 1, 2 and 4 ranks: every result equals the library's bit for bit, and the report
  has no compression line (off by default: results as without compression);
- SHUNT_COMPRESS=auto on a virtual topology of 2 nodes of 2 ranks (SHUNT_TOPOLOGY=node=2): results
  within the bound and equal on every rank; the decide log shows one confirmed plan whose large
  tensors are compressed and whose loss of one float is kept exact; every rank's report counts
  compressed calls (12 steps, 3 exact at each call site by the warm-up, the loss and the smallest
  sums below the threshold) and no fallback;
- the same with SHUNT_COLL=library (the exact path the library's): the reduce-scatter compressed too;
- the same with SHUNT_COMPRESS_WARMUP=20 (more than the run's steps): nothing compressed;
- the same with a NaN at step 8 on one rank: that call exact (NaN where it was, the rest exact), one
  warning, one fallback counted;
- the same with SHUNT_COMPRESS_CHECK=2: shadow lines with the relative error of every second
  compressed call, each within the bound;
- SHUNT_COMPRESS=auto on one node (no topology given): no link limit, so the plan keeps everything exact
  and the results equal the library's;
- compress_half (MPIX_C_FLOAT16 sums, where the library has the type and sums it: not Open MPI 4.1, and not
  Debian 12's MPICH 4.0.2, whose yaksa asserts on any MPIX_C_FLOAT16 sum; skipped there, said so) against
  the exact sums it computes in double: without consent bit for bit; SHUNT_COMPRESS=auto on 2 nodes of 2:
  within int8's bound, at least 9 calls compressed per rank, no fp16 or bf16 option planned for the halves;
  a NaN: that call exact, one warning;
- compress_control (C++, <shunt/compress/control.hpp>) without SHUNT_COMPRESS: its own checks of
  per-communicator and per-call-site consent and of saving and restoring error feedback.
Exit status: 0 pass, 1 fail.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

TIMEOUT = 300


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
    ap.add_argument("--preload-first", default="", help="a library to preload before libshunt.so (the sanitizer runtime)")
    ap.add_argument("--sums", required=True)
    ap.add_argument("--half", required=True)
    ap.add_argument("--control", required=True)
    ap.add_argument("--shunt-info", required=True)
    args = ap.parse_args()

    cache = tempfile.mkdtemp(prefix="shunt-compress-test-")
    base = {k: v for k, v in os.environ.items() if not k.startswith("SHUNT_") and k != "LD_PRELOAD"}
    base["XDG_CACHE_HOME"] = cache

    def run(ranks, program_args, **shunt):
        cmd = [args.mpiexec] + args.mpiexec_arg + ["-n", str(ranks)]
        preload = (args.preload_first + ":" if args.preload_first else "") + args.lib
        cmd += ["-x", "LD_PRELOAD=" + preload] if args.flavour == "openmpi" else ["-genv", "LD_PRELOAD", preload]
        env = dict(base, SHUNT_REPORT="rank", **{"SHUNT_" + k.upper(): str(v) for k, v in shunt.items()})
        try:
            p = subprocess.run(cmd + program_args, capture_output=True, text=True, env=env, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            fail(f"{' '.join(program_args)} at {ranks} ranks with {shunt}: timed out after {TIMEOUT} s")
        what = f"{' '.join(os.path.basename(a) for a in program_args)} at {ranks} ranks with {shunt}"
        if p.returncode != 0:
            fail(what + ": exit status", p)
        return p, what

    def compressed_counts(p, what, ranks):
        counts = [int(m) for m in re.findall(r"compression: (\d+) calls compressed", p.stderr)]
        if len(counts) != ranks:
            fail(f"{what}: {len(counts)} compression report lines, expected {ranks}", p)
        return counts

    # shunt-info's explanation: across 2 nodes a 64 MiB sum compresses, on one node it stays exact.
    # Device buffers on an MPI that is not CUDA-aware, in nodes of one rank: the device place (only
    # the compressed forms copied) beats exact and the host; host buffers there stay exact.
    for per_node, extra, want in (("2", ["auto"], "int8 host allgather, hierarchical"), ("4", ["auto"], "exact"),
                                  ("1", ["int8", "device"], "int8 device allgather"), ("1", ["int8"], "exact")):
        p = subprocess.run([args.shunt_info, "--explain", "compress", str(64 << 20), "4", per_node] + extra,
                           capture_output=True, text=True, env=base, timeout=60)
        chosen = re.findall(r"^  (.+?)\s+[0-9.]+ ms .*<- chosen", p.stdout, re.M)
        if p.returncode != 0 or chosen != [want]:
            fail(f"shunt-info --explain compress 64M 4 {per_node} {' '.join(extra)}: chose {chosen}, expected {want}",
                 p)
    sums = args.sums
    # Off by default: exact, no compression line.
    for ranks in (1, 2, 4):
        p, what = run(ranks, [sums, "exact"])
        if "compression:" in p.stderr:
            fail(f"{what}: a compression report without consent", p)
    # auto across 2 nodes of 2.
    two_nodes = dict(compress="auto", topology="node=2")
    p, what = run(4, [sums, "lossy"], log="debug:decide", **two_nodes)
    plans = re.findall(r"compression plan for a pattern of (\d+) calls on (\S+): (\d+) compressed", p.stderr)
    if len(plans) != 1 or plans[0][0] != "5" or plans[0][1] != "p4.node2":
        fail(f"{what}: expected one plan of 5 calls on p4.node2, got {plans}", p)
    positions = re.findall(r"position \d+: (MPI_\w+) of (\d+) floats -> ([^(]+)\(", p.stderr)
    for call, n, option in positions:
        if int(n) == 1 and option.strip() != "exact":
            fail(f"{what}: the loss of one float is planned {option}", p)
        if int(n) >= 1 << 20 and option.strip() == "exact":
            fail(f"{what}: the gradient of {n} floats is kept exact", p)
    counts = compressed_counts(p, what, 4)
    if min(counts) < 9 or len(set(counts)) != 1:
        fail(f"{what}: compressed calls per rank {counts}, expected at least 9 and equal", p)
    if re.search(r"[1-9]\d* non-finite fallbacks", p.stderr):
        fail(f"{what}: a fallback without NaN", p)
    print(f"ok: {what}: {counts[0]} calls compressed per rank; plan {plans[0]}")
    # Where the exact path is the library's (SHUNT_COLL=library), the reduce-scatter is compressed too.
    p, what = run(4, [sums, "lossy"], log="debug:decide", coll="library", **two_nodes)
    if not re.search(r"position 4: MPI_Reduce_scatter_block of \d+ floats -> (?!exact)", p.stderr):
        fail(f"{what}: the reduce-scatter is not compressed", p)
    # A warm-up longer than the run.
    p, what = run(4, [sums, "lossy"], compress_warmup=20, **two_nodes)
    if max(compressed_counts(p, what, 4)) != 0:
        fail(f"{what}: compressed within the warm-up", p)
    # NaN at step 8 on one rank.
    p, what = run(4, [sums, "lossy", "8"], **two_nodes)
    if len(re.findall(r"NaN or Inf in a compressed reduction", p.stderr)) != 1:
        fail(f"{what}: expected one warning", p)
    if len(re.findall(r" 1 non-finite fallbacks", p.stderr)) != 4:
        fail(f"{what}: expected one fallback on every rank", p)
    # Shadow checks.
    p, what = run(4, [sums, "lossy"], compress_check=2, **two_nodes)
    errors = [float(e) for e in re.findall(r"compression check: .*relative error ([0-9.e+-]+)", p.stderr)]
    if len(errors) < 4 or max(errors) > 5e-2:
        fail(f"{what}: shadow checks {errors}", p)
    print(f"ok: {what}: {len(errors)} shadow checks, relative errors up to {max(errors):.3g}")
    # One node: no link to save, the plan keeps everything exact.
    p, what = run(4, [sums, "exact"], compress="auto", log="debug:decide")
    plans = re.findall(r"compression plan for a pattern of (\d+) calls on (\S+): (\d+) compressed", p.stderr)
    if len(plans) != 1 or plans[0][2] != "0" or max(compressed_counts(p, what, 4)) != 0:
        fail(f"{what}: expected a plan with nothing compressed, got {plans}", p)
    # Half-precision sums, where the library has a binary16 type that it can sum.
    probe = subprocess.run([args.mpiexec] + args.mpiexec_arg + ["-n", "2", args.half, "exact"], capture_output=True,
                           text=True, env=base, timeout=TIMEOUT)
    if probe.returncode == 77 or probe.returncode != 0:
        why = probe.stdout.strip() or (probe.stderr.strip().splitlines() or ["no output"])[0]
        print(f"skip: half sums: the library alone fails them (exit {probe.returncode}: {why})")
    else:
        for ranks in (1, 2, 4):
            p, what = run(ranks, [args.half, "exact"])
            if "compression:" in p.stderr:
                fail(f"{what}: a compression report without consent", p)
        p, what = run(4, [args.half, "lossy", "2e-2"], log="debug:decide", **two_nodes)
        positions = re.findall(r"position \d+: (MPI_\w+) of (\d+) halves -> ([^(]+)\(", p.stderr)
        if len(positions) != 3 or any(o.strip().startswith(("fp16", "bf16")) for _, _, o in positions):
            fail(f"{what}: expected 3 half positions without a cast, got {positions}", p)
        counts = compressed_counts(p, what, 4)
        if min(counts) < 9 or len(set(counts)) != 1:
            fail(f"{what}: compressed calls per rank {counts}, expected at least 9 and equal", p)
        print(f"ok: {what}: {counts[0]} calls compressed per rank; {positions}")
        p, what = run(4, [args.half, "lossy", "2e-2", "8"], **two_nodes)
        if len(re.findall(r"NaN or Inf in a compressed reduction", p.stderr)) != 1:
            fail(f"{what}: expected one warning", p)
        print(f"ok: {what}: one warning")
    # The header API.
    for ranks in (1, 2, 4):
        p, what = run(ranks, [args.control], topology="node=2")
        print(p.stdout.strip())
    print("ok: all")


if __name__ == "__main__":
    main()
