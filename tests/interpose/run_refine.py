#!/usr/bin/env python3
"""tests/interpose/run_refine.py: shunt undoes a wrong model during a run, two ways.

  run_refine.py --mpiexec M [--mpiexec-arg A]... --flavour F --lib L --shunt-info I -- PACK_LOOP

Writes a model file for this machine (its identity from shunt-info) whose 1-byte-block pack and
unpack tables say the library is a little faster than shunt's host packer: at 64 KiB, a few times
faster than the library really is and a few times slower than shunt really is (within the 8x a
correction may move). pack_loop runs preloaded with that model twice; each time it must start on
the library (the model's decision, in the SHUNT_LOG=decide line):
- with SHUNT_PACK=model (no measuring of the layout), it must end with most of its calls on
  shunt's packer (the SHUNT_REPORT counts): the timed calls and the explore bursts corrected the
  model;
- with the default SHUNT_PACK=auto, the planner measures the layout on its first calls: the
  decide log must show shunt's packer chosen from measured times, and no more calls than the
  measuring takes (two warm-ups and the planner's trials) may reach the library. A first verdict
  closer than 2x is measured again eight calls later (the planner's second look): then twice
  that many calls may reach the library. Where shunt's packer is not 2x faster than the library
  on a layout's first, cold calls (as for MPICH's byte-row unpack on some CPUs) the second look
  is the rule, not a fault.
- the same with pack_loop's "vary" mode, where nearly every call packs a new count of the same
  layout (56-64 KiB, one class of the planner's): the class is measured once, and again no more
  calls than the measuring takes may reach the library, although the model prefers it for every
  new count.
- with pack_loop's "dense" mode (one contiguous 64 KiB type), shunt makes the one copy on every
  call without a decision (the library's MPI_Pack is one copy too): no decide line, no call to
  the library, although the model prefers it.
Exit status: 0 pass, 1 fail.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

TIMEOUT = 240
MEASURE_TRIALS = 4  # shunt::planner::measure_trials


def fail(what, p=None):
    print(f"FAIL: {what}", file=sys.stderr)
    if p is not None:
        print(f"  exit {p.returncode}\n  stdout:\n{p.stdout}\n  stderr:\n{p.stderr}", file=sys.stderr)
    sys.exit(1)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--mpiexec-arg", action="append", default=[])
    ap.add_argument("--flavour", choices=["openmpi", "mpich"], required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--preload-first", default="",
                    help="a library to load before libshunt.so (a sanitizer build's runtime)")
    ap.add_argument("--shunt-info", required=True)
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        ap.error("no PACK_LOOP program given")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHUNT_") and k != "LD_PRELOAD"}
    with tempfile.TemporaryDirectory() as tmp:
        # This machine's identity: shunt-info names it when shown a foreign file.
        foreign = os.path.join(tmp, "foreign.json")
        with open(foreign, "w") as f:
            json.dump({"schema": "shunt-model", "version": 1,
                       "identity": {"host": "elsewhere", "gpu": "none", "mpi": "none"}, "tables": {}}, f)
        p = subprocess.run([args.shunt_info, "--model", foreign], capture_output=True, text=True, env=env,
                           timeout=TIMEOUT)
        m = re.search(r"^  this machine is host '(.*)', GPU '(.*)', MPI '(.*)'$", p.stdout, re.M)
        if p.returncode != 1 or m is None:
            fail("shunt-info --model must flag a foreign file and name this machine", p)
        identity = {"host": m.group(1), "gpu": m.group(2), "mpi": m.group(3)}
        # Library 20 us, shunt 22 us for 64 KiB of 1-byte blocks (linear in the size): the library
        # a few times faster than it really is, shunt a few times slower, so only a correction
        # makes shunt's packer the choice.
        sizes = [1024, 65536, 1048576]
        tables = {}
        for op in ("pack", "unpack"):
            tables[f"{op}.library.b1"] = [[s, 20e-6 * s / 65536, 0] for s in sizes]
            tables[f"{op}.shunt.b1"] = [[s, 22e-6 * s / 65536, 0] for s in sizes]
        model = os.path.join(tmp, "wrong.json")
        with open(model, "w") as f:
            json.dump({"schema": "shunt-model", "version": 1, "identity": identity, "tables": tables}, f)
        p = subprocess.run([args.shunt_info, "--model", model], capture_output=True, text=True, env=env,
                           timeout=TIMEOUT)
        if p.returncode != 0:
            fail("shunt-info --model must accept the crafted model", p)

        cmd = [args.mpiexec] + args.mpiexec_arg + ["-n", "1"]
        preload = (args.preload_first + ":" if args.preload_first else "") + args.lib
        cmd += ["-x", "LD_PRELOAD=" + preload] if args.flavour == "openmpi" else ["-genv", "LD_PRELOAD", preload]
        for pack, vary in (("model", False), ("auto", False), ("auto", True)):
            run_env = dict(env, SHUNT_MODEL=model, SHUNT_LOG="debug:decide", SHUNT_REPORT="rank", SHUNT_PACK=pack)
            run = cmd + command + (["6000", "vary"] if vary else [])
            name = f"SHUNT_PACK={pack}{' (vary)' if vary else ''}"
            try:
                p = subprocess.run(run, capture_output=True, text=True, env=run_env, timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                fail(f"timed out after {TIMEOUT} s: {' '.join(run)}")
            if p.returncode != 0 or "every byte right" not in p.stdout:
                fail(f"{name}: pack_loop must pack and unpack every byte right under shunt", p)
            # One element of 65536 blocks, or 57344-65535 elements of one block each.
            shape = r"\d+ x \S+ \((\d+) bytes in \1 blocks" if vary else r"1 x \S+ \(65536 bytes in 65536 blocks"
            for op in ("MPI_Pack", "MPI_Unpack"):
                if not re.search(rf"decide: {op} of {shape}\): the library \(predicted "
                                 r"library [0-9.e+-]+ us, host [0-9.e+-]+ us\)", p.stderr):
                    fail(f"{name}: {op}: the crafted model must first send the calls to the library", p)
                measured = re.search(rf"decide: {op} of {shape} over \d+ bytes\): "
                                     r"shunt's host packer \(measured library [0-9.e+-]+ us, shunt's host packer "
                                     r"[0-9.e+-]+ us(; second look)?\)", p.stderr)
                looks = 2 if re.search(rf"decide: {op} of {shape} over \d+ bytes\): .*; a second look follows\)",
                                       p.stderr) else 1
                if (measured is None) == (pack == "auto"):
                    fail(f"{name}: {op}: the layout must {'' if pack == 'auto' else 'not '}be measured", p)
                m = re.search(rf"{op} (\d+) \(shunt (\d+), \d+ bytes; library (\d+)\)", p.stderr)
                if m is None:
                    fail(f"{name}: no {op} counts in the report", p)
                calls, by_shunt, library = (int(x) for x in m.groups())
                if by_shunt + library != calls:
                    fail(f"{name}: {op}: the report's counts do not add up", p)
                if pack == "model" and by_shunt < calls // 2:
                    fail(f"{op}: refinement must move most calls to shunt's packer: {by_shunt} of {calls} by shunt", p)
                if pack == "auto" and library > looks * (2 + MEASURE_TRIALS):
                    fail(f"{op}: measuring ({looks} look(s)) must send at most {looks * (2 + MEASURE_TRIALS)} calls "
                         f"to the library, not {library}", p)
                how = "refined" if pack == "model" else "measured"
                print(f"{name}: {op} started on the library (the model's choice), {how}: {by_shunt} of "
                      f"{calls} calls by shunt's packer")
        # A contiguous type: one copy either way, made by shunt on every call, never decided.
        run_env = dict(env, SHUNT_MODEL=model, SHUNT_LOG="debug:decide", SHUNT_REPORT="rank")
        p = subprocess.run(cmd + command + ["2000", "dense"], capture_output=True, text=True, env=run_env,
                           timeout=TIMEOUT)
        if p.returncode != 0 or "every byte right" not in p.stdout:
            fail("dense: pack_loop must pack and unpack every byte right under shunt", p)
        if "decide: MPI_Pack of" in p.stderr or "decide: MPI_Unpack of" in p.stderr:
            fail("dense: a contiguous type must not be decided or measured", p)
        for op in ("MPI_Pack", "MPI_Unpack"):
            m = re.search(rf"{op} (\d+) \(shunt (\d+), \d+ bytes; library (\d+)\)", p.stderr)
            if m is None or int(m.group(1)) != 2000 or int(m.group(2)) != 2000:
                fail(f"dense: {op}: all 2000 calls must be shunt's copies", p)
        print("dense: MPI_Pack and MPI_Unpack of a contiguous type: 2000 of 2000 calls by shunt's copy, none decided")
    return 0


if __name__ == "__main__":
    sys.exit(main())
