#!/usr/bin/env python3
"""tests/interpose/run_training.py: the data-parallel training examples keep their accuracy under compression.

  run_training.py --mpiexec M [--mpiexec-arg A]... --flavour F --lib L --cpp TRAIN_MLP [--python TRAIN_MLP_PY]

examples/train_mlp (C++) and, with Open MPI where an interpreter has mpi4py and numpy (Debian's
python3-mpi4py is built for Open MPI), examples/train_mlp.py train at 4 ranks twice under the preload
(the built-in model): exact (no SHUNT_COMPRESS), and with SHUNT_COMPRESS=auto on a virtual topology of 2
nodes of 2 ranks (SHUNT_TOPOLOGY=node=2, so the planner sees a slow link between nodes). The second run's
final test accuracy must be within 0.5 points of the first's, and every rank's report must count compressed
calls. Exit status: 0 pass, 1 fail, 77 when neither example can run.
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

TIMEOUT = 600


def fail(what, p=None):
    print(f"FAIL: {what}", file=sys.stderr)
    if p is not None:
        print(f"  exit {p.returncode}\n  stdout:\n{p.stdout}\n  stderr:\n{p.stderr[-4000:]}", file=sys.stderr)
    sys.exit(1)


def python_with_mpi4py():
    for exe in (sys.executable, "/usr/bin/python3"):
        if exe and os.path.exists(exe) and subprocess.run([exe, "-c", "import mpi4py, numpy"],
                                                          capture_output=True).returncode == 0:
            return exe
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--mpiexec-arg", action="append", default=[])
    ap.add_argument("--flavour", choices=["openmpi", "mpich"], required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--cpp", required=True)
    ap.add_argument("--python")
    args = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="shunt-training-test-")
    base = {k: v for k, v in os.environ.items() if not k.startswith("SHUNT_") and k != "LD_PRELOAD"}
    base.update(XDG_CACHE_HOME=cache, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")

    programs = [("C++", [args.cpp])]
    interpreter = python_with_mpi4py() if args.python and args.flavour == "openmpi" else None
    if interpreter:
        programs.append(("Python", [interpreter, args.python]))
    else:
        print("note: the Python example is skipped (Open MPI and an interpreter with mpi4py and numpy needed)")

    for name, program in programs:
        results = {}
        for label, shunt in (("exact", {}), ("compressed", {"SHUNT_COMPRESS": "auto", "SHUNT_TOPOLOGY": "node=2"})):
            cmd = [args.mpiexec] + args.mpiexec_arg + ["-n", "4"]
            cmd += ["-x", "LD_PRELOAD=" + args.lib] if args.flavour == "openmpi" else ["-genv", "LD_PRELOAD", args.lib]
            env = dict(base, SHUNT_REPORT="rank", **shunt)
            try:
                p = subprocess.run(cmd + program, capture_output=True, text=True, env=env, timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                fail(f"{name} {label}: timed out after {TIMEOUT} s")
            if p.returncode != 0:
                fail(f"{name} {label}: exit status", p)
            m = re.search(r"test accuracy ([0-9.]+)%.*step time ([0-9.]+) ms", p.stdout)
            if not m:
                fail(f"{name} {label}: no final line", p)
            counts = [int(c) for c in re.findall(r"compression: (\d+) calls compressed", p.stderr)]
            if label == "compressed" and (len(counts) != 4 or min(counts) == 0):
                fail(f"{name} {label}: compressed calls per rank {counts}", p)
            if label == "exact" and counts:
                fail(f"{name} {label}: compression without consent", p)
            results[label] = float(m.group(1))
            print(f"{name} {label}: test accuracy {m.group(1)}%, step time {m.group(2)} ms"
                  + (f", {counts[0]} calls compressed per rank" if counts else ""))
        gap = results["exact"] - results["compressed"]
        if abs(gap) > 0.5:
            fail(f"{name}: compressed accuracy {results['compressed']}% is {gap:.2f} points from exact "
                 f"{results['exact']}%")
    print("ok")


if __name__ == "__main__":
    main()
