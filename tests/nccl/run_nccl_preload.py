#!/usr/bin/env python3
"""tests/nccl/run_nccl_preload.py: runs an unmodified NCCL program (linked to the CPU double) without and with
libshunt.so preloaded, and requires the same results in every configuration, clean stderr by default, and
shunt's schedules to have run where SHUNT_NCCL=shunt asks for them: also on the communicators made by
ncclCommInitRankScalable and ncclCommShrink (PROGRAM --creators, where they are the only ones), whose creation
SHUNT_REPORT must count.

  run_nccl_preload.py --mpiexec M [--mpiexec-arg A]... --flavour F --lib L --ranks N [--topology SPEC|auto]
                      [--per-node K] [--per-domain J] PROGRAM

With --per-domain J the topology divides each node into GPU domains of J ranks (e.g. 'domain=2;node=4'):
the forced run must run every allreduce over domain, node and rail (SHUNT_REPORT counts them), and with
measured tables SHUNT_NCCL=auto must follow the fastest of the two- and three-level schedules.

Exit status: 0 pass, 1 fail.
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

TIMEOUT = 300


class Failure(Exception):
    pass


def run(args, preload, env, program_args=()):
    cmd = [args.mpiexec] + (args.mpiexec_arg or []) + ["-n", str(args.ranks)]
    if preload:
        cmd += ["-x", "LD_PRELOAD=" + args.lib] if args.flavour == "openmpi" else ["-genv", "LD_PRELOAD", args.lib]
    full = {k: v for k, v in os.environ.items() if not k.startswith("SHUNT_") and k != "LD_PRELOAD"}
    full.update(env)
    full.setdefault("NCCL_DOUBLE_TIMEOUT", "60")
    if args.flavour == "openmpi":  # ranks started on other hosts (the emulated cluster) get only these
        for k in sorted(full):
            if k.startswith("SHUNT_") or k.startswith("NCCL_"):
                cmd += ["-x", k]
    cmd += [os.path.abspath(args.program)] + list(program_args)
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


def crafted_model(args, tmp, speed=None):
    """A model file for this machine whose nccl.allreduce tables make shunt's schedule 2x faster from 1 MiB
    on this run's shape (its identity from shunt-info, which names this machine when shown a foreign file);
    `speed` gives seconds per byte per method instead."""
    foreign = os.path.join(tmp, "foreign.json")
    with open(foreign, "w") as f:
        json.dump({"schema": "shunt-model", "version": 1,
                   "identity": {"host": "elsewhere", "gpu": "none", "mpi": "none"}, "tables": {}}, f)
    p = subprocess.run([args.shunt_info, "--model", foreign], capture_output=True, text=True, timeout=60)
    m = re.search(r"^  this machine is host '(.*)', GPU '(.*)', MPI '(.*)'$", p.stdout, re.M)
    if m is None:
        raise Failure(f"shunt-info --model did not name this machine:\n{p.stdout}{p.stderr}")
    shape = f"r{args.ranks}n{args.ranks // args.per_node}"
    sizes = [1 << 20, 1 << 24, 1 << 28]
    speed = speed or {"library": 2e-9, "hierarchical": 1e-9}
    tables = {f"nccl.allreduce.{m}.{shape}": [[s, v * s, 0] for s in sizes] for m, v in speed.items()}
    model = os.path.join(tmp, "model.json")
    with open(model, "w") as f:
        json.dump({"schema": "shunt-model", "version": 1,
                   "identity": {"host": m.group(1), "gpu": m.group(2), "mpi": m.group(3)}, "tables": tables}, f)
    return model


LAUNCHER_NOISE = False


def shunt_lines(stderr):
    """What must be empty in a silent run: all of stderr, or with --launcher-noise (the emulated cluster's
    remote starts print warnings of their own) the lines shunt writes (shunt[rank N] or shunt[pid N])."""
    lines = stderr.splitlines()
    return [l for l in lines if l.startswith("shunt[")] if LAUNCHER_NOISE else [l for l in lines if l.strip()]


def shunt_counts(stderr, group=3):
    """Per call, the calls shunt ran (group=2: the calls intercepted), summed over the ranks' report lines."""
    total = {}
    for m in re.finditer(r"(nccl\w+) (\d+) \(shunt (\d+)\)", stderr):
        total[m.group(1)] = total.get(m.group(1), 0) + int(m.group(group))
    return total


def three_level_count(stderr):
    """Allreduces run over domain, node and rail, summed over the ranks' report lines."""
    return sum(int(n) for n in re.findall(r"allreduce over domain\+node\+rail (\d+)", stderr))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--mpiexec", required=True)
    ap.add_argument("--mpiexec-arg", action="append")
    ap.add_argument("--flavour", required=True)
    ap.add_argument("--lib", required=True)
    ap.add_argument("--ranks", type=int, required=True)
    ap.add_argument("--topology", default="node=2", help="SHUNT_TOPOLOGY for the forced runs; auto: unset")
    ap.add_argument("--per-node", type=int, default=2, help="ranks per node of that topology")
    ap.add_argument("--per-domain", type=int, default=0, help="ranks per GPU domain of that topology (0: none)")
    ap.add_argument("--launcher-noise", action="store_true", help="the launcher may write to stderr")
    ap.add_argument("--shunt-info", help="shunt-info, to write a model file for this machine (SHUNT_NCCL=auto)")
    ap.add_argument("program")
    args = ap.parse_args()
    args.lib = os.path.abspath(args.lib)
    global LAUNCHER_NOISE
    LAUNCHER_NOISE = args.launcher_noise
    try:
        want, _, _ = run(args, False, {})
        # Preloaded with nothing set: the same results, and silent.
        got, err, text = run(args, True, {})
        if got != want:
            raise Failure(f"{text}: results differ from the run without shunt:\n{got}\n{want}")
        if shunt_lines(err):
            raise Failure(f"{text}: wrote to stderr with no SHUNT_* set:\n{err}")
        # shunt's schedules forced on nodes of 2 ranks.
        topology = {} if args.topology == "auto" else {"SHUNT_TOPOLOGY": args.topology}
        env = {"SHUNT_NCCL": "shunt", "SHUNT_REPORT": "rank", **topology}
        got, err, text = run(args, True, env)
        if got != want:
            raise Failure(f"{text}: results differ from the run without shunt:\n{got}\n{want}")
        counts = shunt_counts(err)
        hierarchical = args.ranks >= 2 * args.per_node and args.ranks % args.per_node == 0
        domains = args.per_domain > 1 and args.per_node >= 2 * args.per_domain and args.per_node % args.per_domain == 0
        three = three_level_count(err)
        if domains and (three == 0 or three != counts.get("ncclAllReduce", 0)):
            raise Failure(f"{text}: every allreduce of shunt's must run over domain+node+rail "
                          f"({three} of {counts.get('ncclAllReduce', 0)}):\n{err}")
        if not domains and three != 0:
            raise Failure(f"{text}: an allreduce ran over domain+node+rail without domains:\n{err}")
        for call in ["ncclAllReduce", "ncclReduceScatter", "ncclAllGather", "ncclBroadcast", "ncclBcast", "ncclReduce"]:
            ran = counts.get(call, 0)
            if call == "ncclAllReduce" and domains:
                continue  # checked above
            if hierarchical and ran == 0:
                raise Failure(f"{text}: {call} never ran shunt's schedule:\n{err}")
            if not hierarchical and ran != 0:
                raise Failure(f"{text}: {call} ran shunt's schedule without two levels:\n{err}")
        for call in ["ncclSend", "ncclRecv"]:
            if counts.get(call, 0) != 0:
                raise Failure(f"{text}: {call} is always NCCL's:\n{err}")
        # Every rank made a communicator with ncclCommInitRankScalable, the even ones shrank it.
        kept = (args.ranks + 1) // 2 if args.ranks > 1 else 0
        calls = shunt_counts(err, group=2)
        if calls.get("ncclCommInitRankScalable", 0) != args.ranks or calls.get("ncclCommShrink", 0) != kept:
            raise Failure(f"{text}: intercepted ncclCommInitRankScalable {calls.get('ncclCommInitRankScalable', 0)} "
                          f"and ncclCommShrink {calls.get('ncclCommShrink', 0)} times, not {args.ranks} and {kept}:\n"
                          f"{err}")
        # Those two communicators alone: shunt knows them, so its schedule runs their allreduce wherever their ranks
        # form the levels it needs (counted as for the others: nodes of --per-node ranks, or domains in one node).
        def eligible(m):
            return m > 0 and m % args.per_node == 0 and (m >= 2 * args.per_node or (domains and m >= args.per_node))
        want_c, _, _ = run(args, False, {}, ["--creators"])
        got, err, text = run(args, True, env, ["--creators"])
        if got != want_c:
            raise Failure(f"{text}: results differ from the run without shunt:\n{got}\n{want_c}")
        ran = shunt_counts(err).get("ncclAllReduce", 0)
        expected = args.ranks * eligible(args.ranks) + kept * eligible(kept)
        if ran != expected:
            raise Failure(f"{text}: shunt ran {ran} allreduces on the scalable-made and shrunk communicators, "
                          f"expected {expected}:\n{err}")
        if domains and three_level_count(err) != ran:
            raise Failure(f"{text}: every allreduce of shunt's must run over domain+node+rail:\n{err}")
        print(f"--creators, SHUNT_NCCL=shunt: same results; shunt ran {ran} allreduces on the scalable-made and "
              f"shrunk communicators")
        print(f"SHUNT_NCCL=shunt, topology {args.topology}, at {args.ranks} ranks: same results; shunt ran " +
              ", ".join(f"{k} {v}" for k, v in sorted(counts.items()) if v) +
              (f" ({three} allreduces over domain+node+rail)" if three else ""))
        # NCCL keeps every call: by choice, by default without tables, and disabled.
        for env in [{"SHUNT_NCCL": "library", "SHUNT_REPORT": "rank", **topology},
                    {"SHUNT_NCCL": "auto", "SHUNT_REPORT": "rank", **topology},
                    {"SHUNT_DISABLE": "1", "SHUNT_NCCL": "shunt", "SHUNT_REPORT": "rank"}]:
            got, err, text = run(args, True, env)
            if got != want:
                raise Failure(f"{text}: results differ from the run without shunt:\n{got}\n{want}")
            if any(shunt_counts(err).values()):
                raise Failure(f"{text}: shunt ran a schedule:\n{err}")
            if "SHUNT_DISABLE" in env and shunt_lines(err):
                raise Failure(f"{text}: SHUNT_DISABLE=1 must be silent:\n{err}")
        # SHUNT_NCCL=auto with a model whose measured tables make shunt's allreduce faster on this shape.
        if args.shunt_info and (hierarchical or domains):
            with tempfile.TemporaryDirectory() as tmp:
                model = crafted_model(args, tmp, {"library": 2e-9, "hierarchical": 1e-9, "hierarchical3": 0.5e-9}
                                      if domains else None)
                env = {"SHUNT_NCCL": "auto", "SHUNT_REPORT": "rank", "SHUNT_MODEL": model, "SHUNT_LOG": "decide",
                       **topology}
                got, err, text = run(args, True, env)
                if got != want:
                    raise Failure(f"{text}: results differ from the run without shunt:\n{got}\n{want}")
                counts = shunt_counts(err)
                if counts.get("ncclAllReduce", 0) == 0 or any(v for k, v in counts.items() if k != "ncclAllReduce"):
                    raise Failure(f"{text}: the tables favour shunt's allreduce only:\n{err}")
                if domains and three_level_count(err) != counts["ncclAllReduce"]:
                    raise Failure(f"{text}: the tables favour the three-level allreduce:\n{err}")
                print(f"SHUNT_NCCL=auto with measured tables: shunt ran ncclAllReduce {counts['ncclAllReduce']}" +
                      (f", {three_level_count(err)} over domain+node+rail" if domains else ""))
            # Two levels measured faster than three: auto takes them (where there are several nodes).
            if domains and hierarchical:
                with tempfile.TemporaryDirectory() as tmp:
                    model = crafted_model(args, tmp, {"library": 2e-9, "hierarchical": 0.5e-9, "hierarchical3": 1e-9})
                    env = {"SHUNT_NCCL": "auto", "SHUNT_REPORT": "rank", "SHUNT_MODEL": model, **topology}
                    got, err, text = run(args, True, env)
                    if got != want:
                        raise Failure(f"{text}: results differ from the run without shunt:\n{got}\n{want}")
                    if shunt_counts(err).get("ncclAllReduce", 0) == 0 or three_level_count(err) != 0:
                        raise Failure(f"{text}: the tables favour the two-level allreduce:\n{err}")
                    print("SHUNT_NCCL=auto, two levels measured faster: shunt ran ncclAllReduce over node+rail")
        runs = 7 + (1 if args.shunt_info and (hierarchical or domains) else 0) + \
            (1 if args.shunt_info and domains and hierarchical else 0)
        print(f"{args.ranks} ranks: {len(want)} result lines equal in {runs} configurations")
    except Failure as e:
        print(f"FAIL: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
