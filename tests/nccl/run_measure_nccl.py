#!/usr/bin/env python3
"""tests/nccl/run_measure_nccl.py: shunt-measure --nccl on NCCL's CPU double (host memory) at 4 ranks in two nodes of
2 (SHUNT_TOPOLOGY=node=2), then the readers of what it wrote: an NCCL program under the preload with SHUNT_NCCL=auto,
and shunt-info --explain. The double's figures only exercise the path; they are no GPU's.

  run_measure_nccl.py --mpiexec M [--mpiexec-arg A]... --flavour F --measure SHUNT_MEASURE --double LIBNCCL_DOUBLE
                      --lib LIBSHUNT --shunt-info SHUNT_INFO --program NCCL_OPS

Checks: both tables of each of the five operations for r4n2, NCCL's and the three-level allreduce's on one node of two
GPU domains (r4n1), at sizes from 1 MiB up, times positive, the largest size's above the smallest's,
the file's other tables kept; a second run without --force measures nothing and leaves the file as it was; a
one-node job and a corrupt file are refused clearly; the program's decisions (SHUNT_LOG=decide) name the tables and
follow them, its results equal the run without shunt, and shunt ran exactly the operations the tables favour; shunt-info
predicts a table's own points. Exit status: 0 pass, 1 fail, 77 where shunt-measure cannot run the mode here.
"""
import argparse
import json
import math
import os
import re
import subprocess
import sys
import tempfile

TIMEOUT = 240
RANKS, PER_NODE = 4, 2
SHAPE = "r4n2"
OPS = ["allreduce", "reduce_scatter", "allgather", "broadcast", "reduce"]
SHIMS = {"allreduce": ["ncclAllReduce"], "reduce_scatter": ["ncclReduceScatter"], "allgather": ["ncclAllGather"],
         "broadcast": ["ncclBroadcast", "ncclBcast"], "reduce": ["ncclReduce"]}
MARGIN = 0.03  # measured_win_margin (include/shunt/model/model.hpp)
MIN_BYTES = 1 << 20  # nccl_min_bytes (include/shunt/plan/nccl.hpp)


class Failure(Exception):
    pass


class Skip(Exception):
    pass


def mpirun(args, program_args, env, preload=False):
    cmd = [args.mpiexec] + (args.mpiexec_arg or []) + ["-n", str(RANKS)]
    if preload:
        cmd += ["-x", "LD_PRELOAD=" + args.lib] if args.flavour == "openmpi" else ["-genv", "LD_PRELOAD", args.lib]
    full = {k: v for k, v in os.environ.items() if not k.startswith("SHUNT_") and k != "LD_PRELOAD"}
    full.setdefault("NCCL_DOUBLE_TIMEOUT", "60")
    full.update(env)
    cmd += program_args
    text = " ".join(f"{k}={v}" for k, v in env.items()) + " " + " ".join(cmd)
    try:
        p = subprocess.run(cmd, env=full, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=TIMEOUT, text=True)
    except subprocess.TimeoutExpired:
        raise Failure(f"timed out after {TIMEOUT} s: {text}")
    return p, text


def measure(args, out, extra=(), env=None):
    return mpirun(args, [args.measure, "--nccl", "--nccl-host-memory", "--nccl-library", args.double, "--output", out,
                         *extra], {"SHUNT_TOPOLOGY": f"node={PER_NODE}", **(env or {})})


def check_tables(path):
    with open(path) as f:
        tables = json.load(f)["tables"]
    for op in OPS:
        for method in ["library", "hierarchical"]:
            name = f"nccl.{op}.{method}.{SHAPE}"
            pts = tables.get(name)
            if not pts or len(pts) < 2:
                raise Failure(f"{path}: no table {name} of 2 points or more: {pts}")
            sizes = [p[0] for p in pts]
            times = [p[1] for p in pts]
            if sizes[0] < MIN_BYTES or any(b <= a for a, b in zip(sizes, sizes[1:])):
                raise Failure(f"{name}: sizes must grow from 1 MiB: {sizes}")
            # Neighbouring sizes may swap on a loaded machine (the double's sockets, busy-polling
            # ranks); 16 times the bytes may not.
            if any(not (t > 0 and math.isfinite(t)) for t in times) or times[-1] <= times[0]:
                raise Failure(f"{name}: times must be positive and the largest size's above the smallest's: {times}")
    return tables


def near(a, b, rel):
    return abs(a - b) <= rel * max(abs(a), abs(b)) + 1e-9


def bracket(points, size):
    """The points around `size` (both the same at a measured size), None outside the table."""
    if size < points[0][0] or size > points[-1][0]:
        return None
    for lo, hi in zip(points, points[1:]):
        if lo[0] <= size <= hi[0]:
            return lo, hi
    return points[0], points[0]


def check_decisions(tables, err):
    """Every decision line names the run's tables, predicts within the points around its size, and picks shunt's
    schedule exactly where the predictions favour it; returns the operations some decision gave to shunt."""
    pattern = re.compile(r"nccl (\w+) of (\d+) bytes on (r\d+n\d+): (NCCL|shunt's schedule over node\+rail) "
                         r"\((\S+) (\S+) us, (\S+) (\S+) us\)")
    decisions = [m.groups() for m in pattern.finditer(err)]
    if not decisions:
        raise Failure(f"SHUNT_LOG=decide logged no NCCL decision:\n{err}")
    to_shunt, seen = set(), set()
    for op, nbytes, shape, method, lib_name, lib_us, hier_name, hier_us in decisions:
        nbytes = int(nbytes)
        what = f"decision for {op} of {nbytes} bytes"
        if shape != SHAPE or lib_name != f"nccl.{op}.library.{SHAPE}" or hier_name != f"nccl.{op}.hierarchical.{SHAPE}":
            raise Failure(f"{what}: names {shape}, {lib_name}, {hier_name}")
        seen.add(op)
        predicted = {}
        for name, us in [(lib_name, lib_us), (hier_name, hier_us)]:
            around = bracket(tables[name], nbytes)
            t = float(us) * 1e-6
            if around is None:
                if nbytes >= MIN_BYTES and method != "NCCL":
                    raise Failure(f"{what}: outside {name}, yet not NCCL's")
                continue
            lo, hi = min(around[0][1], around[1][1]), max(around[0][1], around[1][1])
            if not (lo * 0.995 <= t <= hi * 1.005):  # the log prints 3 digits
                raise Failure(f"{what}: {name} predicts {t} s, outside its points {around}")
            predicted[name] = t
        if len(predicted) == 2 and nbytes >= MIN_BYTES:
            ratio = predicted[hier_name] / predicted[lib_name]
            if abs(ratio - (1 - MARGIN)) < 0.01:
                pass  # too close to the margin to judge from 3 printed digits
            elif (ratio < 1 - MARGIN) != (method != "NCCL"):
                raise Failure(f"{what}: {method} although the tables predict {predicted}")
        elif method != "NCCL":
            raise Failure(f"{what}: {method} without both tables covering {nbytes} bytes")
        if method != "NCCL":
            to_shunt.add(op)
    missing = set(OPS) - seen
    if missing:
        raise Failure(f"no decision logged for {sorted(missing)}:\n{err}")
    return to_shunt


def shunt_counts(stderr):
    total = {}
    for m in re.finditer(r"(nccl\w+) (\d+) \(shunt (\d+)\)", stderr):
        total[m.group(1)] = total.get(m.group(1), 0) + int(m.group(3))
    return total


def explain(args, model, op, nbytes):
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHUNT_")}
    env["SHUNT_MODEL"] = model
    p = subprocess.run([args.shunt_info, "--explain", f"nccl-{op}", str(nbytes), str(RANKS), str(PER_NODE)], env=env,
                       capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        raise Failure(f"shunt-info --explain nccl-{op} failed:\n{p.stdout}{p.stderr}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--mpiexec-arg", action="append")
    ap.add_argument("--flavour", required=True)
    ap.add_argument("--measure", required=True)
    ap.add_argument("--double", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--shunt-info", required=True)
    ap.add_argument("--program", required=True)
    args = ap.parse_args()
    for a in ["measure", "double", "lib", "shunt_info", "program"]:
        setattr(args, a, os.path.abspath(getattr(args, a)))
    try:
        with tempfile.TemporaryDirectory() as tmp:
            model = os.path.join(tmp, "model-nccl.json")
            # A file holding other tables already (a tuner table, an MPI one): they stay.
            others = {"nccl.allreduce.ring.simple.r4n2": [[1024, 1e-5, 0], [1048576, 1e-4, 0]],
                      "copy.memcpy": [[1024, 1e-7, 0], [1048576, 1e-4, 0]]}
            with open(model, "w") as f:
                json.dump({"schema": "shunt-model", "version": 1,
                           "identity": {"host": "h", "gpu": "none", "mpi": "nccl"}, "tables": others}, f)
            p, text = measure(args, model)
            if p.returncode == 77:
                raise Skip(p.stderr.strip())
            if p.returncode != 0:
                raise Failure(f"{text}: exit {p.returncode}\n{p.stdout}{p.stderr}")
            if "not a GPU's" not in p.stdout:
                raise Failure(f"{text}: does not say its figures are the double's:\n{p.stdout}")
            tables = check_tables(model)
            for name, pts in others.items():
                if tables.get(name) != pts:
                    raise Failure(f"{model}: lost or changed {name}: {tables.get(name)}")
            print(f"measured: {len([n for n in tables if n.endswith(SHAPE) and n not in others])} tables of {SHAPE}")

            # Again without --force: nothing to measure, the file as it was.
            with open(model, "rb") as f:
                before = f.read()
            p, text = measure(args, model)
            if p.returncode != 0 or "0 nccl method tables measured" not in p.stdout:
                raise Failure(f"{text}: a second run must measure nothing:\n{p.stdout}{p.stderr}")
            with open(model, "rb") as f:
                if f.read() != before:
                    raise Failure(f"{text}: the second run changed {model}")
            p, text = measure(args, model, ["--dry-run", "--force", "--only", "nccl.reduce."])
            listed = sorted(l for l in p.stdout.splitlines() if l.startswith("would measure"))
            if p.returncode != 0 or listed != [f"would measure nccl.reduce.hierarchical.{SHAPE}",
                                               f"would measure nccl.reduce.library.{SHAPE}"]:
                raise Failure(f"{text}: exit {p.returncode}, listed {listed}\n{p.stderr}")

            # Refusals: one node (77, measuring nothing); a corrupt file (an error, the file untouched).
            p, text = measure(args, os.path.join(tmp, "none.json"), env={"SHUNT_TOPOLOGY": f"node={RANKS}"})
            if p.returncode != 77 or "one node" not in p.stderr or os.path.exists(os.path.join(tmp, "none.json")):
                raise Failure(f"{text}: one node must exit 77 and say so:\n{p.stdout}{p.stderr}")
            # GPU domains inside the node (domain=2;node=4: one node of two domains of 2 ranks): NCCL's allreduce and
            # the three-level schedule only, the two-level one being no schedule on one node.
            domains = os.path.join(tmp, "domains.json")
            p, text = measure(args, domains, ["--only", "nccl.allreduce."], env={"SHUNT_TOPOLOGY": "domain=2;node=4"})
            if p.returncode != 0:
                raise Failure(f"{text}: exit {p.returncode}\n{p.stdout}{p.stderr}")
            with open(domains) as f:
                got = json.load(f)["tables"]
            want_names = ["nccl.allreduce.hierarchical3.r4n1", "nccl.allreduce.library.r4n1"]
            if sorted(got) != want_names or any(not pts or any(pt[1] <= 0 for pt in pts) for pts in got.values()):
                raise Failure(f"{text}: wrote {sorted(got)}, not {want_names} with positive times:\n{p.stdout}")
            print(f"measured with GPU domains: {', '.join(sorted(got))}")
            corrupt = os.path.join(tmp, "corrupt.json")
            with open(corrupt, "w") as f:
                f.write('{"schema": "shunt-model", "tables": {"nccl.allreduce')
            p, text = measure(args, corrupt)
            with open(corrupt) as f:
                kept = f.read().endswith("nccl.allreduce")
            if p.returncode != 1 or corrupt not in p.stderr or "error" not in p.stderr or not kept:
                raise Failure(f"{text}: a corrupt file must be an error and stay as it was:\n{p.stdout}{p.stderr}")
            print("refused: one node (77), a corrupt file (error, file kept)")

            # The NCCL program under the preload decides from the file.
            ref, text = mpirun(args, [args.program], {})
            if ref.returncode != 0:
                raise Failure(f"{text}: exit {ref.returncode}\n{ref.stdout}{ref.stderr}")
            env = {"SHUNT_NCCL": "auto", "SHUNT_MODEL": model, "SHUNT_LOG": "decide", "SHUNT_REPORT": "rank",
                   "SHUNT_TOPOLOGY": f"node={PER_NODE}"}
            got, text = mpirun(args, [args.program], env, preload=True)
            if got.returncode != 0:
                raise Failure(f"{text}: exit {got.returncode}\n{got.stdout}{got.stderr}")
            results = [sorted(l for l in r.stdout.splitlines() if l.startswith("rank ")) for r in (ref, got)]
            if len(results[0]) != RANKS or results[0] != results[1]:
                raise Failure(f"{text}: results differ from the run without shunt:\n{results[1]}\n{results[0]}")
            to_shunt = check_decisions(tables, got.stderr)
            counts = shunt_counts(got.stderr)
            for op in OPS:
                ran = sum(counts.get(s, 0) for s in SHIMS[op])
                if (ran > 0) != (op in to_shunt):
                    raise Failure(f"{text}: shunt ran {ran} {op} calls, decisions gave it {sorted(to_shunt)}:\n"
                                  f"{got.stderr}")
            print(f"SHUNT_NCCL=auto: same results; the tables gave shunt {sorted(to_shunt) or 'nothing'}; shunt ran " +
                  ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if v))

            # shunt-info predicts each table's own point at a measured size.
            for op in OPS:
                nbytes = int(tables[f"nccl.{op}.library.{SHAPE}"][1][0])
                out = explain(args, model, op, nbytes)
                for method in ["library", "hierarchical"]:
                    name = f"nccl.{op}.{method}.{SHAPE}"
                    want = next(p[1] for p in tables[name] if p[0] == nbytes)
                    m = re.search(rf"^  {method}\s+predicted\s+(\S+) us \(measured table {re.escape(name)}\)$", out,
                                  re.M)
                    if m is None or not near(float(m.group(1)) * 1e-6, want, 1e-3):
                        raise Failure(f"shunt-info --explain nccl-{op} {nbytes}: want {name} at {want * 1e6} us:\n"
                                      f"{out}")
            print("shunt-info --explain: each table's points predicted")
    except Skip as e:
        print(f"SKIP: {e}")
        return 77
    except Failure as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
