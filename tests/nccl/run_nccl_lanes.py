#!/usr/bin/env python3
"""tests/nccl/run_nccl_lanes.py: NCCL's lane knobs under the preload. Runs nccl-lanes (linked to the CPU double) with
libshunt.so preloaded and SHUNT_FLOW in several forms; the double appends the NCCL_IB_* variables it saw at each
communicator's creation to NCCL_DOUBLE_ENV_LOG, and each case's expected variables come from the case itself:
hashed:K gives NCCL_IB_QPS_PER_CONNECTION=K and NCCL_IB_SPLIT_DATA_ON_QPS=1 whichever entry (ncclCommInitRank,
ncclCommInitRankConfig, ncclCommInitRankScalable, ncclCommInitAll) creates the first communicator, a value the
user set is kept, and off, unset, auto, pinned, hashed:1, SHUNT_DISABLE and no preload set nothing. Also the debug log line and the warnings, and (with --mpiexec) the same under MPI at 2 ranks.

  run_nccl_lanes.py --lib L [--mpiexec M [--mpiexec-arg A]... --flavour F] PROGRAM

Exit status: 0 pass, 1 fail.
"""
import argparse
import os
import socket
import subprocess
import sys
import tempfile

TIMEOUT = 120
QPS, SPLIT = "NCCL_IB_QPS_PER_CONNECTION", "NCCL_IB_SPLIT_DATA_ON_QPS"


class Failure(Exception):
    pass


def run(args, tmp, entry, env, preload=True, mpi=False):
    """Runs the program; returns (the variables seen at each creation, one dict per communicator, and stderr)."""
    record = os.path.join(tmp, "seen")
    if os.path.exists(record):
        os.remove(record)
    full = {k: v for k, v in os.environ.items()
            if not k.startswith("SHUNT_") and not k.startswith("NCCL_IB_") and k != "LD_PRELOAD"}
    full.update(env)
    full["NCCL_DOUBLE_ENV_LOG"] = record
    full.setdefault("NCCL_DOUBLE_TIMEOUT", "60")
    if mpi:
        cmd = [args.mpiexec] + (args.mpiexec_arg or []) + ["-n", "2"]
        if args.flavour == "openmpi":
            if preload:
                cmd += ["-x", "LD_PRELOAD=" + os.path.abspath(args.lib)]
            for k in sorted(full):
                if k.startswith("SHUNT_") or k.startswith("NCCL_"):
                    cmd += ["-x", k]
        elif preload:
            cmd += ["-genv", "LD_PRELOAD", os.path.abspath(args.lib)]
        cmd += [os.path.abspath(args.program), "--mpi", entry]
    else:
        if preload:
            full["LD_PRELOAD"] = os.path.abspath(args.lib)
        cmd = [os.path.abspath(args.program), entry]
    text = " ".join(f"{k}={v}" for k, v in env.items()) + (" (no preload) " if not preload else " ") + " ".join(cmd)
    try:
        p = subprocess.run(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT, text=True)
    except subprocess.TimeoutExpired:
        raise Failure(f"timed out after {TIMEOUT} s: {text}")
    if p.returncode != 0:
        raise Failure(f"failed: {text}\n  exit {p.returncode}\n  stdout:\n{p.stdout}\n  stderr:\n{p.stderr}")
    seen = []
    if os.path.exists(record):
        with open(record) as f:
            for line in f.read().splitlines():
                seen.append(dict(item.split("=", 1) for item in line.split()))
    return seen, p.stderr, text


def expect(args, tmp, entry, env, want, comms, preload=True, mpi=False, stderr_has=None, quiet=True):
    """One case: every communicator saw exactly `want` among NCCL_IB_*; stderr empty (`quiet`) or holding
    each of `stderr_has`."""
    seen, err, text = run(args, tmp, entry, env, preload, mpi)
    if len(seen) != comms:
        raise Failure(f"{text}: the double recorded {len(seen)} communicator creations, expected {comms}: {seen}")
    for s in seen:
        if s != want:
            raise Failure(f"{text}: NCCL saw {s or 'no NCCL_IB_* variable'} at its communicator's creation, "
                          f"expected {want or 'none'}\n  stderr:\n{err}")
    for needle in stderr_has or []:
        if needle not in err:
            raise Failure(f"{text}: stderr lacks '{needle}':\n{err}")
    if quiet and not stderr_has and err.strip():
        raise Failure(f"{text}: expected a silent run, stderr:\n{err}")
    print(f"ok: {text}: {want or 'nothing set'}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--lib", required=True)
    ap.add_argument("--mpiexec")
    ap.add_argument("--mpiexec-arg", action="append")
    ap.add_argument("--flavour", choices=["openmpi", "mpich"])
    ap.add_argument("program")
    args = ap.parse_args()
    comms = {"rank": 1, "config": 1, "scalable": 1, "all": 2}
    host = socket.gethostname()
    try:
        with tempfile.TemporaryDirectory() as tmp:
            # hashed:K sets K queue pairs with split data, whichever entry creates the first communicator.
            for entry, n in comms.items():
                expect(args, tmp, entry, {"SHUNT_FLOW": "hashed:4"}, {QPS: "4", SPLIT: "1"}, n)
            expect(args, tmp, "rank", {"SHUNT_FLOW": "hashed:3"}, {QPS: "3", SPLIT: "1"}, 1)
            expect(args, tmp, "scalable", {"SHUNT_FLOW": "hashed:2", QPS: "3"}, {QPS: "3", SPLIT: "1"}, 1)
            # With a fabric that lists this host, hashed:K still takes K.
            fabric = f"spines=2;leaves={{{host},other-a|other-b,other-c}}"
            expect(args, tmp, "config", {"SHUNT_FLOW": "hashed:2", "SHUNT_FABRIC": fabric}, {QPS: "2", SPLIT: "1"}, 1)
            # What the user set stays; the other knob is still set.
            expect(args, tmp, "rank", {"SHUNT_FLOW": "hashed:4", QPS: "2"}, {QPS: "2", SPLIT: "1"}, 1)
            expect(args, tmp, "all", {"SHUNT_FLOW": "hashed:4", SPLIT: "0"}, {QPS: "4", SPLIT: "0"}, 2)
            # Nothing set: SHUNT_FLOW unset, off, auto, pinned (NCCL's queue pairs cannot be pinned), one lane,
            # shunt disabled, and the program without shunt.
            for flow in [None, "off", "auto", "pinned", "pinned:2", "hashed:1"]:
                env = {} if flow is None else {"SHUNT_FLOW": flow}
                for entry, n in comms.items():
                    expect(args, tmp, entry, env, {}, n)
            expect(args, tmp, "rank", {"SHUNT_FLOW": "hashed:4", "SHUNT_DISABLE": "1"}, {}, 1)
            expect(args, tmp, "all", {"SHUNT_FLOW": "hashed:4"}, {}, 2, preload=False)
            # A request that cannot be met sets nothing and says why (a warning, shown by default).
            expect(args, tmp, "rank", {"SHUNT_FLOW": "hashed"}, {}, 1, stderr_has=["SHUNT_FABRIC"])
            expect(args, tmp, "rank", {"SHUNT_FLOW": "hashed:4", "SHUNT_FABRIC": "spines=2;leaves={h1,h2|h3,h4}"},
                   {}, 1, stderr_has=[f"host '{host}' is not listed"])
            expect(args, tmp, "rank", {"SHUNT_FLOW": "sprayed"}, {}, 1, stderr_has=["SHUNT_FLOW: 'sprayed'"])
            # SHUNT_LOG=debug says what was set and what was kept.
            expect(args, tmp, "rank", {"SHUNT_FLOW": "hashed:4", "SHUNT_LOG": "debug"}, {QPS: "4", SPLIT: "1"}, 1,
                   stderr_has=[f"{QPS}=4", f"{SPLIT}=1"])
            expect(args, tmp, "rank", {"SHUNT_FLOW": "hashed:4", "SHUNT_LOG": "debug", QPS: "2"},
                   {QPS: "2", SPLIT: "1"}, 1, stderr_has=[f"kept {QPS}=2", f"{SPLIT}=1"])
            # Under MPI (MPI_Init's own lane set-up first), each rank's communicator.
            if args.mpiexec:
                for entry in ["rank", "config", "scalable"]:
                    expect(args, tmp, entry, {"SHUNT_FLOW": "hashed:4"}, {QPS: "4", SPLIT: "1"}, 2, mpi=True,
                           quiet=False)
                    expect(args, tmp, entry, {"SHUNT_FLOW": "auto"}, {}, 2, mpi=True, quiet=False)
                    expect(args, tmp, entry, {}, {}, 2, mpi=True, quiet=False)
    except Failure as e:
        print(f"FAIL: {e}")
        return 1
    print("pass")
    return 0


if __name__ == "__main__":
    sys.exit(main())
