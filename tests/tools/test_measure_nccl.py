#!/usr/bin/env python3
"""tests/tools/test_measure_nccl.py: shunt-measure --nccl-tuner: where it cannot measure (no CUDA device on a rank, no
NCCL library, one rank) it says why on one line and exits 77 with no model written; where it can (2 ranks with a
device each and NCCL), it writes nccl tables of the job's shape. Argument errors exit 2."""
import json, os, subprocess, sys, tempfile

mpiexec, mpiexec_args, measure = sys.argv[1], sys.argv[2].split(), sys.argv[3]
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
failures = []
REFUSALS = ("it needs a CUDA device on every rank", "built without CUDA", "built without NCCL's header",
            "cannot use NCCL from", "it needs 2 ranks or more", "share a node's devices")


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run(args, ranks=None):
    cmd = ([mpiexec] + mpiexec_args + ["-n", str(ranks)] if ranks else []) + [measure] + args
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)


with tempfile.TemporaryDirectory() as tmp:
    out = os.path.join(tmp, "nccl.json")
    for ranks in (None, 2):
        p = run(["--nccl-tuner", "--only", "nccl.allreduce.ring.", "--output", out], ranks)
        where = "singleton" if ranks is None else f"{ranks} ranks"
        lines = [l for l in p.stderr.splitlines() if l.startswith("shunt-measure:")]
        if p.returncode == 0:  # a machine with a device per rank and NCCL: real tables
            tables = json.load(open(out))["tables"]
            check(ranks == 2 and tables and all(n.startswith("nccl.allreduce.ring.") and n.endswith(".r2n1")
                                                for n in tables), f"{where}: measured ring allreduce tables: {list(tables)}")
            continue
        # Every rank exits 77; launchers pass some non-zero status on (Open MPI's mpirun: 77).
        check(p.returncode == 77 or (ranks is not None and p.returncode != 0),
              f"{where}: exit status 77 where nothing can be measured ({p.returncode})")
        check(len(lines) == 1 and "--nccl-tuner" in lines[0] and lines[0].endswith("nothing measured") and
              any(r in lines[0] for r in REFUSALS), f"{where}: one line saying why: {lines}")
        check(not os.path.exists(out), f"{where}: no model file written")
        check(p.stdout == "", f"{where}: nothing on stdout")
    # A missing NCCL library is named (checked after the device: only reached where devices exist).
    p = run(["--nccl-tuner", "--nccl-library", os.path.join(tmp, "libnone.so"), "--output", out])
    check(p.returncode == 77 and "nothing measured" in p.stderr, "a missing NCCL library: 77 and why")
    p = run(["--nccl-tuner", "--validate"])
    check(p.returncode == 2 and "--validate and --decisions are for the MPI tables" in p.stderr,
          "--nccl-tuner with --validate: a usage error")
    p = run(["--nccl-library"])
    check(p.returncode == 2 and "needs a library name or path" in p.stderr, "--nccl-library without a value: 2")

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
