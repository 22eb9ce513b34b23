#!/usr/bin/env python3
"""tests/nccl/run_nccl_preload.py: runs an unmodified NCCL program (linked to the CPU double) without and with
libshunt.so preloaded, and requires the same results in every configuration, clean stderr by default, and
shunt's schedules to have run where SHUNT_NCCL=shunt asks for them.

  run_nccl_preload.py --mpiexec M [--mpiexec-arg A]... --flavour F --lib L --ranks N [--nodes-of K] PROGRAM

Exit status: 0 pass, 1 fail.
"""
import argparse
import os
import re
import subprocess
import sys

TIMEOUT = 300


class Failure(Exception):
    pass


def run(args, preload, env):
    cmd = [args.mpiexec] + (args.mpiexec_arg or []) + ["-n", str(args.ranks)]
    if preload:
        cmd += ["-x", "LD_PRELOAD=" + args.lib] if args.flavour == "openmpi" else ["-genv", "LD_PRELOAD", args.lib]
    cmd += [os.path.abspath(args.program)]
    full = {k: v for k, v in os.environ.items() if not k.startswith("SHUNT_") and k != "LD_PRELOAD"}
    full.update(env)
    full.setdefault("NCCL_DOUBLE_TIMEOUT", "60")
    text = " ".join(f"{k}={v}" for k, v in env.items()) + " " + " ".join(cmd)
    try:
        p = subprocess.run(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT, text=True)
    except subprocess.TimeoutExpired:
        raise Failure(f"timed out after {TIMEOUT} s: {text}")
    if p.returncode != 0:
        raise Failure(f"failed: {text}\n  exit {p.returncode}\n  stdout:\n{p.stdout}\n  stderr:\n{p.stderr}")
    lines = sorted(l for l in p.stdout.splitlines() if l.startswith("rank "))
    if len(lines) != args.ranks:
        raise Failure(f"{text}: expected {args.ranks} result lines, got:\n{p.stdout}")
    return lines, p.stderr, text


def shunt_counts(stderr):
    """Per call, the calls shunt ran, summed over the ranks' report lines."""
    total = {}
    for m in re.finditer(r"(nccl\w+) (\d+) \(shunt (\d+)\)", stderr):
        total[m.group(1)] = total.get(m.group(1), 0) + int(m.group(3))
    return total


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--mpiexec-arg", action="append")
    ap.add_argument("--flavour", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("program")
    args = ap.parse_args()
    args.lib = os.path.abspath(args.lib)
    try:
        want, _, _ = run(args, False, {})
        # Preloaded with nothing set: the same results, and silent.
        got, err, text = run(args, True, {})
        if got != want:
            raise Failure(f"{text}: results differ from the run without shunt:\n{got}\n{want}")
        if err.strip():
            raise Failure(f"{text}: wrote to stderr with no SHUNT_* set:\n{err}")
        # shunt's schedules forced on nodes of 2 ranks.
        env = {"SHUNT_NCCL": "shunt", "SHUNT_TOPOLOGY": "node=2", "SHUNT_REPORT": "rank"}
        got, err, text = run(args, True, env)
        if got != want:
            raise Failure(f"{text}: results differ from the run without shunt:\n{got}\n{want}")
        counts = shunt_counts(err)
        hierarchical = args.ranks >= 4 and args.ranks % 2 == 0
        for call in ["ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast", "ncclBcast", "ncclReduce"]:
            ran = counts.get(call, 0)
            if hierarchical and ran == 0:
                raise Failure(f"{text}: {call} never ran shunt's schedule:\n{err}")
            if not hierarchical and ran != 0:
                raise Failure(f"{text}: {call} ran shunt's schedule without two levels:\n{err}")
        for call in ["ncclSend", "ncclRecv"]:
            if counts.get(call, 0) != 0:
                raise Failure(f"{text}: {call} is always NCCL's:\n{err}")
        print(f"SHUNT_NCCL=shunt node=2 at {args.ranks} ranks: same results; shunt ran " +
              ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if v))
        # NCCL keeps every call: by choice, by default without tables, and disabled.
        for env in [{"SHUNT_NCCL": "library", "SHUNT_REPORT": "rank", "SHUNT_TOPOLOGY": "node=2"},
                    {"SHUNT_NCCL": "auto", "SHUNT_REPORT": "rank", "SHUNT_TOPOLOGY": "node=2"},
                    {"SHUNT_DISABLE": "1", "SHUNT_NCCL": "shunt", "SHUNT_REPORT": "rank"}]:
            got, err, text = run(args, True, env)
            if got != want:
                raise Failure(f"{text}: results differ from the run without shunt:\n{got}\n{want}")
            if any(shunt_counts(err).values()):
                raise Failure(f"{text}: shunt ran a schedule:\n{err}")
            if "SHUNT_DISABLE" in env and err.strip():
                raise Failure(f"{text}: SHUNT_DISABLE=1 must be silent:\n{err}")
        print(f"{args.ranks} ranks: {len(want)} result lines equal in 5 configurations")
    except Failure as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
