#!/usr/bin/env python3
"""tests/nccl/test_tuner_plugin.py: libshunt-nccl-tuner.so loaded and called the way NCCL 2.28.9 does (tuner_loader),
with crafted model files in a temporary directory: the cost tables it fills against hand-computed ones, every table
left alone without a model, with a bad one (one warning), under SHUNT_DISABLE, for other shapes, sizes outside the
tables and aggregated calls; SHUNT_LOG=decide's lines; silence by default; no NCCL, CUDA or MPI dependency."""
import json
import os
import re
import socket
import subprocess
import sys
import tempfile

loader, plugin, info = sys.argv[1], sys.argv[2], sys.argv[3]
failures = []

IGNORE = -1.0
TREE, RING = 0, 1
LL, LL128, SIMPLE = 0, 1, 2
BROADCAST, ALLGATHER, REDUCE_SCATTER, ALLREDUCE = 0, 2, 3, 4


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def flat(us, first=1024, last=1 << 20):
    """A table of `us` microseconds at every size from `first` to `last` bytes."""
    return [[first, us * 1e-6, 0], [last, us * 1e-6, 0]]


# The crafted model, shape r4n1 (4 ranks on 1 node), and one table of another shape.
TABLES = {
    "nccl.allreduce.ring.ll.r4n1": flat(30),
    # 40 us at 1 KiB, 160 us at 4 KiB: 80 us at 2 KiB (log-log: sqrt(40 * 160)).
    "nccl.allreduce.ring.ll128.r4n1": [[1024, 40e-6, 0], [4096, 160e-6, 0]],
    "nccl.allreduce.tree.simple.r4n1": flat(20),
    "nccl.broadcast.ring.ll.r4n1": flat(30),
    "nccl.broadcast.tree.ll.r4n1": flat(29.5),  # within 3% of 30: NCCL's ring/ll stays
    "nccl.reduce_scatter.ring.ll.r4n1": flat(30),
    "nccl.reduce_scatter.tree.simple.r4n1": flat(10),
    "nccl.allreduce.ring.ll.r8n2": flat(1),
}


def model_json(host="anywhere", library="nccl", tables=TABLES):
    return json.dumps({"schema": "shunt-model", "version": 1,
                       "identity": {"host": host, "gpu": "NVIDIA H100", "mpi": library}, "tables": tables})


def estimates(nbytes):
    """The loader's stand-in for NCCL's estimates (tuner_loader.c): tree and ring, latency + bytes / bandwidth."""
    t = [IGNORE] * 21
    latency = {TREE: (5, 7, 12), RING: (4, 6, 10)}
    bandwidth = (1, 4, 8)
    for a in (TREE, RING):
        for p in (LL, LL128, SIMPLE):
            t[a * 3 + p] = latency[a][p] + nbytes / (1000 * bandwidth[p])
    return t


def written(cells):
    """The table the plugin must leave when it changes NCCL's pick: measured cells, every other cell ignored."""
    t = [IGNORE] * 21
    for (a, p), us in cells.items():
        t[a * 3 + p] = us
    return t


def close(a, b):
    return len(a) == len(b) and all(abs(x - y) <= 1e-5 * max(1.0, abs(y)) for x, y in zip(a, b))


def run(steps, env_extra, drop=("SHUNT_MODEL", "SHUNT_LOG", "SHUNT_DISABLE", "XDG_CACHE_HOME")):
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(env_extra)
    p = subprocess.run([loader, plugin] + [str(s) for s in steps], env=env, capture_output=True, text=True,
                       timeout=60)
    records = []
    for line in p.stdout.splitlines():
        try:
            records.append(json.loads(line))
        except ValueError:
            check(False, "the loader's stdout is JSON only (the plugin writes nothing there): " + line[:120])
    return p, records


def calls(records):
    return [r for r in records if "call" in r]


def untouched_everywhere(records, what):
    cs = calls(records)
    check(len(cs) > 0 and all(c["after"] == c["before"] and c["pick"] == c["nccl_pick"] for c in cs),
          what + ": every cost table untouched")
    check(all(c["call"] == 0 and c["channels"] == 0 for c in cs), what + ": ncclSuccess, channel count unset")


STEPS = ["comm", 4, 1,
         "call", ALLREDUCE, 2048,  # 0: tree/simple 20 us beats NCCL's ring/ll (30 us measured)
         "call", ALLREDUCE, 1 << 20,  # 1: NCCL picks ring/simple, which has no table: NCCL alone
         "call", ALLREDUCE, 512,  # 2: below every table
         "call", ALLREDUCE, 2048, 2,  # 3: two operations aggregated
         "call", ALLGATHER, 2048,  # 4: no allgather tables
         "call", BROADCAST, 2048,  # 5: within the margin
         "call", REDUCE_SCATTER, 2048, 2,  # 6: aggregated
         "call", REDUCE_SCATTER, 2048,  # 7: tree/simple 10 us beats ring/ll 30 us
         "threads", 4, 2000, ALLREDUCE, 2048,
         "comm", 8, 1, "call", ALLREDUCE, 2048,  # 8: no table for 8 ranks on 1 node
         "comm", 4, 2, "call", ALLREDUCE, 2048]  # 9: nor for 4 ranks on 2 nodes


def check_crafted(records, what):
    check(records and records[0].get("plugin") == "shunt", what + ": ncclTunerPlugin_v5 named 'shunt'")
    inits = [r for r in records if "init" in r]
    check([(i["init"], i["context"], i["constants_kept"]) for i in inits] ==
          [(0, True, True), (0, False, True), (0, False, True)],
          what + ": init succeeds for every communicator, with a context where tables exist, constants kept")
    check(len(inits) == 3 and "7 measured tables for r4n1" in " ".join(inits[0]["log"]),
          what + ": NCCL's log names the tables found: " + repr(inits[0]["log"] if inits else None))
    check(len(inits) == 3 and "0 measured tables for r8n1" in " ".join(inits[1]["log"]),
          what + ": NCCL's log says when a shape has none")
    cs = calls(records)
    if len(cs) != 10:
        check(False, what + f": 10 calls answered ({len(cs)})")
        return
    check(all(c["call"] == 0 and c["channels"] == 0 for c in cs), what + ": ncclSuccess, channel count unset")
    check(all(close(c["before"], estimates(c["bytes"])) for c in cs), what + ": the loader's estimates as expected")
    check(cs[0]["nccl_pick"] == [RING, LL] and cs[0]["pick"] == [TREE, SIMPLE] and
          close(cs[0]["after"], written({(TREE, SIMPLE): 20, (RING, LL): 30, (RING, LL128): 80})),
          what + ": allreduce 2 KiB: measured times written, tree/simple runs: " + repr(cs[0]["after"]))
    for i, why in [(1, "NCCL's pick unmeasured"), (2, "size below the tables"), (3, "aggregated call"),
                   (4, "no allgather tables"), (5, "within the margin"), (6, "aggregated call"),
                   (8, "no tables for r8n1"), (9, "no tables for r4n2")]:
        check(cs[i]["after"] == cs[i]["before"], f"{what}: call {i} untouched ({why})")
    check(cs[1]["nccl_pick"] == [RING, SIMPLE], what + ": NCCL's own pick at 1 MiB is ring/simple")
    check(cs[7]["pick"] == [TREE, SIMPLE] and close(cs[7]["after"], written({(TREE, SIMPLE): 10, (RING, LL): 30})),
          what + ": reduce_scatter 2 KiB: tree/simple runs")
    th = [r for r in records if "threads" in r]
    check(th == [{"threads": 4, "failures": 0}], what + ": four threads on one communicator all get the same table")
    check(sum(1 for r in records if r.get("finalize") == 0) == 3, what + ": finalize succeeds for every communicator")


with tempfile.TemporaryDirectory() as tmp:
    home = os.path.join(tmp, "home")
    os.makedirs(home)
    given = os.path.join(tmp, "given.json")
    with open(given, "w") as f:
        f.write(model_json(host="elsewhere", library="Open MPI v4.1.4"))  # SHUNT_MODEL: any identity

    p, records = run(STEPS, {"SHUNT_MODEL": given, "HOME": home})
    check(p.returncode == 0, "crafted model: the loader succeeds: " + p.stderr[-300:])
    check_crafted(records, "crafted model")
    check(p.stderr == "", "crafted model: silent by default: " + p.stderr[-300:])

    # shunt-info explains the same call from the same file, with the times the plugin wrote.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHUNT_")}
    q = subprocess.run([info, "--explain", "nccl-tuner", "allreduce", "2048", "--ranks", "4"],
                       env=dict(env, SHUNT_MODEL=given), capture_output=True, text=True, timeout=60)
    shown = {m.group(1): float(m.group(2)) for m in re.finditer(r"^  (\S+) +measured +([0-9.]+) us$", q.stdout, re.M)}
    after = calls(records)[0]["after"] if calls(records) else []
    same = q.returncode == 0 and len(after) == 21 and "fastest measured: tree/simple" in q.stdout and shown == {
        "tree/simple": after[TREE * 3 + SIMPLE], "ring/ll": after[RING * 3 + LL], "ring/ll128": after[RING * 3 + LL128]}
    check(same, "shunt-info --explain nccl-tuner shows the times the plugin writes" +
          ("" if same else ": " + q.stdout + q.stderr))

    # Explained under SHUNT_LOG=decide: one line per (collective, size class, shape) with measured cells.
    p, records = run(["comm", 4, 1, "call", ALLREDUCE, 2048, "call", ALLREDUCE, 2048, "call", ALLREDUCE, 3000,
                      "call", ALLREDUCE, 4096, "call", ALLGATHER, 2048, "call", BROADCAST, 2048,
                      "call", BROADCAST, 2100],
                     {"SHUNT_MODEL": given, "HOME": home, "SHUNT_LOG": "decide"})
    lines = p.stderr.splitlines()
    allreduce = [l for l in lines if "decide: nccl allreduce" in l]
    check(p.returncode == 0 and len(allreduce) == 2,
          f"SHUNT_LOG=decide: one line per size class of allreduce (2 KiB, 4 KiB): {len(allreduce)}")
    check(any("tree/simple instead of NCCL's ring/ll" in l and "tree/simple 20/12.3" in l and "ring/ll128 80/6.51" in l
              for l in allreduce), "SHUNT_LOG=decide: the change and every alternative's times: " + repr(allreduce[:1]))
    check(sum("decide: nccl broadcast" in l and "NCCL's ring/ll kept, within 3%" in l for l in lines) == 1,
          "SHUNT_LOG=decide: the broadcast kept within the margin, once")
    check(not any("allgather" in l for l in lines), "SHUNT_LOG=decide: nothing for calls without tables")
    check(all(l.startswith("shunt[pid ") for l in lines), "SHUNT_LOG=decide: shunt's prefix on every line")

    # No model at the default location: every table untouched, nothing printed.
    p, records = run(STEPS, {"HOME": home})
    check(p.returncode == 0, "no model: the loader succeeds")
    untouched_everywhere(records, "no model")
    check(p.stderr == "", "no model: silent: " + p.stderr[-300:])
    inits = [r for r in records if "init" in r]
    check(inits and not inits[0]["context"] and "no model file at " + home in " ".join(inits[0]["log"]),
          "no model: NCCL's log says where none was found: " + repr(inits[0]["log"] if inits else None))

    # This host's model at the default location: used; another host's there: one warning.
    host = "".join(c if c.isascii() and (c.isalnum() or c in "._-") else "_" for c in socket.gethostname())[:80]
    default = os.path.join(home, ".cache", "shunt", f"model-{host or 'unknown'}-nccl.json")
    os.makedirs(os.path.dirname(default))
    with open(default, "w") as f:
        f.write(model_json(host=socket.gethostname()))
    p, records = run(STEPS, {"HOME": home})
    check(p.returncode == 0 and p.stderr == "", "default location: the loader succeeds, silently")
    check_crafted(records, "default location")
    with open(default, "w") as f:
        f.write(model_json(host="elsewhere"))
    p, records = run(STEPS, {"HOME": home})
    untouched_everywhere(records, "foreign default file")
    warnings = p.stderr.splitlines()
    check(len(warnings) == 1 and "warning" in warnings[0] and "foreign" in warnings[0],
          "foreign default file: one warning: " + p.stderr[-300:])

    # Bad files named by SHUNT_MODEL: one warning for the process (three communicators), NCCL alone.
    corrupt = os.path.join(tmp, "corrupt.json")
    with open(corrupt, "w") as f:
        f.write('{"schema": "shunt-model", "version": 1, "identity": {"host": "h", "gpu": "g", "mpi": "nccl"}, '
                '"tables": {"nccl.allreduce.ring.ll.r4n1": [[1024, -1, 0]]}}')
    for path, why in [(corrupt, "out-of-range"), (os.path.join(tmp, "absent.json"), "cannot read"),
                      (tmp, "corrupt")]:
        p, records = run(STEPS, {"SHUNT_MODEL": path, "HOME": home})
        check(p.returncode == 0, f"bad model ({why}): the loader succeeds")
        untouched_everywhere(records, f"bad model ({why})")
        warnings = p.stderr.splitlines()
        check(len(warnings) == 1 and "warning" in warnings[0] and why in warnings[0] and "NCCL tuner" in warnings[0],
              f"bad model ({why}): exactly one warning: " + p.stderr[-300:])

    # SHUNT_DISABLE=1: a pure pass-through, even with a model.
    p, records = run(STEPS, {"SHUNT_MODEL": given, "HOME": home, "SHUNT_DISABLE": "1"})
    untouched_everywhere(records, "SHUNT_DISABLE=1")
    check(p.returncode == 0 and p.stderr == "", "SHUNT_DISABLE=1: silent")

# Loadable into NCCL-only programs: no NCCL, CUDA or MPI library needed, one symbol exported.
needed = subprocess.run(["readelf", "-d", plugin], capture_output=True, text=True).stdout
libs = [l.split("[")[1].rstrip("]") for l in needed.splitlines() if "(NEEDED)" in l]
check(libs and not any(k in l for l in libs for k in ("nccl", "cuda", "mpi", "hwloc")),
      "the plugin needs no NCCL, CUDA, MPI or hwloc library: " + " ".join(libs))
exported = [l.split()[-1] for l in subprocess.run(["nm", "-D", "--defined-only", plugin], capture_output=True,
                                                   text=True).stdout.splitlines() if l.strip()]
check(exported == ["ncclTunerPlugin_v5"], "the plugin exports ncclTunerPlugin_v5 and nothing else: " + repr(exported))

print(f"{len(failures)} failure(s)")
sys.exit(1 if failures else 0)
