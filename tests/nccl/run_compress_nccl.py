#!/usr/bin/env python3
"""tests/nccl/run_compress_nccl.py: gradient compression of ncclAllReduce under the preload, on compress_nccl.cpp
(an NCCL loop of float gradients checked against the sums it computes itself) and the CPU double of NCCL.

  run_compress_nccl.py --mpiexec M [--mpiexec-arg A]... --flavour F --lib L --ranks N [--device] PROGRAM

Each run has the built-in model (an empty cache directory) and these expectations:
- no SHUNT_COMPRESS: every result equals the program's sum bit for bit, and no compression line;
- with 4 ranks or more, SHUNT_COMPRESS=auto on a virtual topology of 2 nodes (SHUNT_TOPOLOGY=node=N/2):
  results within the bound, not exact (the values do not fit FP16), equal on every rank; the decide
  log shows one plan of the 4 consented calls per step whose loss of one float is kept exact and
  whose gradient of 2^20 floats is compressed, hierarchically (exact ncclReduceScatter in the node,
  the scheme on the rail, ncclAllGather in the node); every rank's report counts the same compressed calls
  (at least 9: 12 steps, 3 exact before the plan) and no fallback; the grouped, the ncclMax and the
  int32 sums stay exact (the program checks them);
- the same with SHUNT_COMPRESS_WARMUP=20 (more than the run's steps): nothing compressed;
- the same with a NaN at step 8 on one rank: that call exact (NaN where it was, the rest exact), one
  warning, one fallback counted on every rank;
- the same with SHUNT_COMPRESS_CHECK=2: shadow lines with the relative error of every second
  compressed call, each within the bound;
- half and bfloat16 gradients (ncclFloat16, ncclBfloat16), values exact in either type, checked against
  the program's sum in double: without consent half bit for bit, bfloat16 within NCCL's rounding;
  SHUNT_COMPRESS=auto on 2 nodes compresses them with int8, hierarchically, within 1e-2 (the casts
  are no smaller than the data; int8 pays on the rail's half of the data); SHUNT_COMPRESS=randomk compresses
  them (the plan's half positions random-k, one at least as the hierarchical allreduce of the summable
  form; at least 9 calls per rank; its error is about 1, as
  random-k keeps one element in 100 and error feedback carries the rest to later steps); a NaN in
  half data: that call exact, one warning, one fallback per rank;
- at 4 ranks, the alltoall+allgather scheme (compressed slices by grouped ncclSend/ncclRecv, each sum
  compressed again and gathered), which the built-in model prefers for int4 with 3 nodes or more, or
  flat where nodes differ in size: SHUNT_COMPRESS=int4 at 4 ranks on nodes of 3 and 1 (flat) and at 6
  ranks on 3 nodes of 2 (hierarchical), each with a NaN at step 8: the gradients planned int4
  alltoall+allgather (flat, resp. hierarchical), within int4's bound for a twice compressed sum (0.6),
  the NaN call exact, one warning and one fallback per rank;
- the auto case again with libcudart.so loaded after libshunt.so (no driver here): compressed as before
  (a process with the CUDA runtime and no device has no stream capturing; host buffers only);
- the header API on NCCL communicators (compress-nccl control, its own checks), at every rank count;
- with fewer than 4 ranks: SHUNT_COMPRESS=off compresses nothing, and SHUNT_COMPRESS=auto on one node
  (no topology: no link to save) plans every call exact, every result bit for bit.
--device (PROGRAM compress-nccl-device, run with --device: every buffer given to NCCL in device memory of
device 0, which the double stages through host memory, so that the CUDA compressors and the device schemes
run): the same cases without the NaN ones (the device path has no guard: a NaN spreads as in the exact sum)
and the warm-up's (the planner's, alike for both), each plan for "device buffers" with "device" options; the
plan weighs the compute between stream-ordered calls, so that the halves' and random-k's expectations hold for
the largest gradient and every gradient compressed rather than all three; the alltoall+allgather cases expect
the device scheme (int4 device alltoall+allgather). Exit 77 (skipped) where the program finds no device.
Exit status: 0 pass, 1 fail, 77 skipped.
"""
import argparse
import glob
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
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--device", action="store_true", help="compress-nccl --device: device buffers on one GPU")
    ap.add_argument("program")
    args = ap.parse_args()
    ranks = args.ranks
    device = args.device
    place = "device" if device else "host"

    cache = tempfile.mkdtemp(prefix="shunt-compress-nccl-test-")
    base = {k: v for k, v in os.environ.items() if not k.startswith("SHUNT_") and k != "LD_PRELOAD"}
    base["XDG_CACHE_HOME"] = cache
    base.setdefault("NCCL_DOUBLE_TIMEOUT", "60")

    def run(program_args, preload_after="", **shunt):
        cmd = [args.mpiexec] + args.mpiexec_arg + ["-n", str(ranks)]
        preload = args.lib + (":" + preload_after if preload_after else "")
        cmd += ["-x", "LD_PRELOAD=" + preload] if args.flavour == "openmpi" else ["-genv", "LD_PRELOAD", preload]
        env = dict(base, SHUNT_REPORT="rank", **{"SHUNT_" + k.upper(): str(v) for k, v in shunt.items()})
        program_args = (["--device"] if device else []) + program_args
        try:
            p = subprocess.run(cmd + [os.path.abspath(args.program)] + program_args, capture_output=True, text=True,
                               env=env, timeout=TIMEOUT)
        except subprocess.TimeoutExpired:
            fail(f"{' '.join(program_args)} at {ranks} ranks with {shunt}: timed out after {TIMEOUT} s")
        what = f"compress-nccl {' '.join(program_args)} at {ranks} ranks with {shunt}"
        if device and "compress_nccl: skipped" in p.stdout:
            print(f"skip: {p.stdout.strip()}")
            sys.exit(77)
        if p.returncode != 0:
            fail(what + ": exit status", p)
        if device and "device" not in p.stdout:
            fail(what + ": the program does not say it used device buffers", p)
        return p, what

    def compressed_counts(p, what):
        counts = [int(m) for m in re.findall(r"compression: (\d+) calls compressed", p.stderr)]
        if len(counts) != ranks:
            fail(f"{what}: {len(counts)} compression report lines, expected {ranks}", p)
        return counts

    # The header API on NCCL communicators, nodes of 2 ranks.
    p, what = run(["control"], topology="node=2")
    print(f"ok: {what}: {p.stdout.strip()}")
    # Half and bfloat16 without consent: exact (the program checks), no compression line.
    for ty in ("f16", "bf16"):
        p, what = run(["exact", "-1", ty])
        if "compression:" in p.stderr:
            fail(f"{what}: a compression report without consent", p)
        print(f"ok: {what}: {p.stdout.strip()}")
    # Off by default: exact, no compression line.
    p, what = run(["exact"])
    if "compression:" in p.stderr:
        fail(f"{what}: a compression report without consent", p)
    print(f"ok: {what}: {p.stdout.strip()}")
    if ranks < 4:
        p, what = run(["exact"], compress="off")
        if "compression:" in p.stderr:
            fail(f"{what}: a compression report with SHUNT_COMPRESS=off", p)
        print(f"ok: {what}: {p.stdout.strip()}")
        # One node: no link to save, the plan keeps everything exact (the program checks bit for bit).
        p, what = run(["exact"], compress="auto", log="debug:decide")
        plans = re.findall(r"NCCL compression plan for a pattern of (\d+) ncclAllReduce calls .*: (\d+) compressed",
                           p.stderr)
        if len(plans) != 1 or plans[0] != ("4", "0") or max(compressed_counts(p, what)) != 0:
            fail(f"{what}: expected one plan of 4 calls with nothing compressed, got {plans}", p)
        print(f"ok: {what}: one plan, nothing compressed; {p.stdout.strip()}")
        return

    two_nodes = dict(compress="auto", topology=f"node={max(1, ranks // 2)}")
    p, what = run(["lossy"], log="debug:decide", **two_nodes)
    plans = re.findall(r"NCCL compression plan for a pattern of (\d+) ncclAllReduce calls on (\d+) ranks "
                       r"in nodes of (\d+) \((\w+) buffers\): (\d+) compressed", p.stderr)
    if len(plans) != 1 or plans[0][0] != "4" or plans[0][3] != place:
        fail(f"{what}: expected one plan of 4 calls on {place} buffers, got {plans}", p)
    positions = re.findall(r"position \d+: ncclAllReduce of (\d+) floats -> ([^(]+)\(", p.stderr)
    if len(positions) != 4:
        fail(f"{what}: {len(positions)} positions in the plan's log, expected 4", p)
    for n, option in positions:
        if int(n) == 1 and option.strip() != "exact":
            fail(f"{what}: the loss of one float is planned {option}", p)
        if int(n) >= 1 << 20 and option.strip() == "exact":
            fail(f"{what}: the gradient of {n} floats is kept exact", p)
    counts = compressed_counts(p, what)
    if min(counts) < 9 or len(set(counts)) != 1:
        fail(f"{what}: compressed calls per rank {counts}, expected at least 9 and equal", p)
    if re.search(r"[1-9]\d* non-finite fallbacks", p.stderr):
        fail(f"{what}: a fallback without NaN", p)
    # The compressors' bound is the program's; a compressed sum cannot be exact (see its values).
    error = re.search(r"largest relative error ([0-9.e+-]+)", p.stdout)
    if error is None or not 0 < float(error.group(1)) < 5e-2:
        fail(f"{what}: the largest relative error {error and error.group(1)} is not in (0, 5e-2)", p)
    chosen = sorted({o.strip() for _, o in positions})
    if not any(o.endswith(", hierarchical") for o in chosen):
        fail(f"{what}: expected a hierarchical scheme on 2 nodes, got {chosen}", p)
    if any(o != "exact" and f" {place} " not in o for o in chosen):
        fail(f"{what}: expected every compressed option on the {place}, got {chosen}", p)
    print(f"ok: {what}: {counts[0]} calls compressed per rank; plan {plans[0]}, options {chosen}; "
          f"{p.stdout.strip()}")

    # The same with the CUDA runtime loaded in a process without a driver (a host-memory NCCL program
    # linked to libcudart): no stream can be capturing, so compression goes on.
    cudart = sorted(glob.glob(os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "lib64", "libcudart.so.*")))
    if not device and cudart:
        p, what = run(["lossy"], preload_after=cudart[0], **two_nodes)
        counts = compressed_counts(p, what)
        if min(counts) < 9:
            fail(f"{what}: compressed calls per rank {counts} with libcudart loaded, expected at least 9", p)
        print(f"ok: {what}: {counts[0]} calls compressed per rank with {os.path.basename(cudart[0])} loaded")
    elif not device:
        print("note: no libcudart.so under CUDA_HOME or /usr/local/cuda: the no-driver capture case not run")

    # A warm-up longer than the run (the planner's, alike for both kinds of buffers: on the host only).
    if not device:
        p, what = run(["lossy"], compress_warmup=20, **two_nodes)
        if max(compressed_counts(p, what)) != 0:
            fail(f"{what}: compressed within the warm-up", p)
        print(f"ok: {what}: nothing compressed")

    # NaN at step 8 on one rank: that call exact, one warning, one fallback on every rank (the host path's guard).
    if not device:
        p, what = run(["lossy", "8"], **two_nodes)
        if len(re.findall(r"NaN or Inf in a compressed reduction", p.stderr)) != 1:
            fail(f"{what}: expected one warning", p)
        if len(re.findall(r" 1 non-finite fallbacks", p.stderr)) != ranks:
            fail(f"{what}: expected one fallback on every rank", p)
        print(f"ok: {what}: one warning, one fallback per rank; {p.stdout.strip()}")

    # Shadow checks.
    p, what = run(["lossy"], compress_check=2, **two_nodes)
    errors = [float(e) for e in re.findall(r"compression check: ncclAllReduce .*relative error ([0-9.e+-]+)", p.stderr)]
    if len(errors) < 4 or max(errors) > 5e-2 or min(errors) <= 0:
        fail(f"{what}: shadow checks {errors}", p)
    print(f"ok: {what}: {len(errors)} shadow checks, relative errors up to {max(errors):.3g}")

    # Half and bfloat16 gradients under auto: int8 pays once the hierarchy keeps the inter-node part small
    # (the casts are no smaller than the data); within int8's bound (the program checks 1e-2).
    # On the device the largest gradient and every compressed one (the plan may keep a smaller one exact where the
    # compute between stream-ordered calls hides its exchange).
    for ty in ("f16", "bf16"):
        p, what = run(["lossy", "-1", ty, "1e-2"], log="debug:decide", **two_nodes)
        halves = re.findall(r"position \d+: ncclAllReduce of (\d+) (halves|bfloat16s) -> ([^(]+)\(", p.stderr)
        int8 = [int(c) for c, _, o in halves if re.fullmatch(f"int8 {place} .*, hierarchical", o.strip())]
        exact = [int(c) for c, _, o in halves if o.strip() == "exact"]
        if len(halves) != 3 or len(int8) + (len(exact) if device else 0) != 3 or (1 << 20) not in int8:
            fail(f"{what}: expected the 3 gradients planned int8 {place}, hierarchical, got {halves}", p)
        counts = compressed_counts(p, what)
        if min(counts) < 9 or len(set(counts)) != 1:
            fail(f"{what}: compressed calls per rank {counts}, expected at least 9 and equal", p)
        print(f"ok: {what}: planned {sorted({o.strip() for _, _, o in halves})}; {p.stdout.strip()}")
    # Half and bfloat16 gradients under random-k: compressed, within random-k's bound.
    randomk = dict(compress="randomk", topology=f"node={max(1, ranks // 2)}")
    for ty in ("f16", "bf16"):
        p, what = run(["lossy", "-1", ty, "1.5"], log="debug:decide", **randomk)
        halves = re.findall(r"position \d+: ncclAllReduce of (\d+) (halves|bfloat16s) -> ([^(]+)\(", p.stderr)
        randomk_planned = [int(c) for c, _, o in halves if o.strip().startswith(f"randomk {place} ")]
        exact = [int(c) for c, _, o in halves if o.strip() == "exact"]
        if (len(halves) != 3 or len(randomk_planned) + (len(exact) if device else 0) != 3 or
                (1 << 20) not in randomk_planned):
            fail(f"{what}: expected the 3 gradients planned random-k on the {place}, got {halves}", p)
        if not any(o.strip() == f"randomk {place} allreduce, hierarchical" for _, _, o in halves):
            fail(f"{what}: expected a gradient planned random-k's hierarchical allreduce, got {halves}", p)
        counts = compressed_counts(p, what)
        if min(counts) < 9 or len(set(counts)) != 1:
            fail(f"{what}: compressed calls per rank {counts}, expected at least 9 and equal", p)
        print(f"ok: {what}: {counts[0]} calls compressed per rank; {p.stdout.strip()}")
    # NaN in half data.
    if not device:
        p, what = run(["lossy", "8", "f16", "1.5"], **randomk)
        if len(re.findall(r"NaN or Inf in a compressed reduction", p.stderr)) != 1:
            fail(f"{what}: expected one warning", p)
        if len(re.findall(r" 1 non-finite fallbacks", p.stderr)) != ranks:
            fail(f"{what}: expected one fallback on every rank", p)
        print(f"ok: {what}: one warning, one fallback per rank; {p.stdout.strip()}")

    # alltoall+allgather, flat (nodes of 3 and 1) at 4 ranks and hierarchical (3 nodes of 2) at 6.
    if ranks != 4:
        return
    # On the device without the NaN; until the device path has this scheme the plan gives it allgather, and this fails.
    for n, topology, want in ((4, "node=3,1", f"int4 {place} alltoall+allgather"),
                              (6, "node=2", f"int4 {place} alltoall+allgather, hierarchical")):
        ranks = n
        p, what = run(["lossy", "-1" if device else "8", "f32", "0.6"], compress="int4", topology=topology,
                      log="debug:decide")
        positions = re.findall(r"position \d+: ncclAllReduce of (\d+) floats -> ([^(]+)\(", p.stderr)
        grads = [o.strip() for c, o in positions if int(c) > 1]
        if len(grads) != 3 or any(o != want for o in grads):
            fail(f"{what}: expected the 3 gradients planned {want}, got {positions}", p)
        counts = compressed_counts(p, what)
        if min(counts) < (9 if device else 8) or len(set(counts)) != 1:
            fail(f"{what}: compressed calls per rank {counts}, expected at least {9 if device else 8} and equal", p)
        if device:
            if re.search(r"[1-9]\d* non-finite fallbacks", p.stderr):
                fail(f"{what}: a fallback without NaN", p)
            print(f"ok: {what}: {want}, {counts[0]} calls compressed per rank; {p.stdout.strip()}")
            continue
        if len(re.findall(r"NaN or Inf in a compressed reduction", p.stderr)) != 1:
            fail(f"{what}: expected one warning", p)
        if len(re.findall(r" 1 non-finite fallbacks", p.stderr)) != ranks:
            fail(f"{what}: expected one fallback on every rank", p)
        print(f"ok: {what}: {want}, {counts[0]} calls compressed per rank, one fallback; {p.stdout.strip()}")


if __name__ == "__main__":
    main()
