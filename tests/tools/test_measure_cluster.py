#!/usr/bin/env python3
# tests/tools/test_measure_cluster.py: shunt-measure across two emulated nodes (run inside
# bench/cluster/cluster.sh, 2 ranks per node): each node's first rank writes its own node's model
# file at the default location, with its own copy tables and the same shared (point-to-point,
# collective) tables, so shunt on either node loads a file of its own and all ranks agree on the
# shared ones; a node whose file is lost gets it back without the other's being measured again.
import glob, json, os, subprocess, sys, tempfile

measure, info = sys.argv[1], sys.argv[2]
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
env.pop("SHUNT_MODEL", None)
failures = []
# A node's copy table, the job's point-to-point tables and one collective's: enough to see each
# kind land in the right files, in a fraction of a full run.
only = ["--only", "copy.", "--only", "p2p.", "--only", "coll.allreduce."]

def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what, flush=True)
    if not cond:
        failures.append(what)

def mpirun(ranks, args, cache, extra=()):
    cmd = ["mpirun", "-n", str(ranks), *extra, "-x", "XDG_CACHE_HOME=" + cache] + args
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=400)

def files(cache):
    return {host: glob.glob(os.path.join(cache, "shunt", f"model-{host}-*.json")) for host in ("node0", "node1")}

def tables(path):
    with open(path) as f:
        j = json.load(f)
    return j["identity"]["host"], j["tables"]

def shared(t):
    return {k: v for k, v in t.items() if k.startswith(("p2p.", "coll."))}

with tempfile.TemporaryDirectory() as cache:
    p = mpirun(4, [measure, "--quick"] + only, cache)
    check(p.returncode == 0, "a two-node run succeeds: " + p.stderr[-400:])
    wrote = [l for l in p.stdout.splitlines() if l.startswith("shunt-measure: wrote")]
    check(len(wrote) == 2, f"one file written per node ({len(wrote)}: {wrote})")
    f = files(cache)
    check(all(len(v) == 1 for v in f.values()), f"node0 and node1 each have a model file of their own ({f})")
    if all(len(v) == 1 for v in f.values()):
        host0, t0 = tables(f["node0"][0])
        host1, t1 = tables(f["node1"][0])
        check((host0, host1) == ("node0", "node1"), f"each file names its own host ({host0}, {host1})")
        check("copy.memcpy" in t0 and "copy.memcpy" in t1, "each node measured its own copy table")
        check(not any(k.startswith("pack.") for k in t0), "--only leaves other tables unmeasured")
        s0, s1 = shared(t0), shared(t1)
        check("p2p.network.hh" in s0 and "p2p.node.hh" in s0 and any(k.startswith("coll.allreduce.library.p4") for k in s0)
              and any(k.startswith("coll.allreduce.hierarchical.p4") for k in s0),
              "the shared tables hold the inter-node, intra-node and collective tables: " + " ".join(sorted(s0)))
        check(s0 == s1, "both nodes hold the same shared tables")

        # shunt on each node loads its own file (shunt-info --model exits 0 only for this host's file).
        p = mpirun(2, [info, "--model"], cache, ["--map-by", "node"])
        valid = [l for l in p.stdout.splitlines() if "valid shunt model" in l]
        check(p.returncode == 0 and len(valid) == 2 and "FOREIGN" not in p.stdout,
              "shunt-info --model on each node accepts that node's file: " + p.stdout[-400:] + p.stderr[-200:])

        # node1's file lost: only it lacks tables; node0's own table is not measured again and the
        # shared ones are measured afresh into both files.
        os.remove(f["node1"][0])
        p = mpirun(4, [measure, "--quick", "--dry-run"] + only, cache)
        todo = sorted(l.split()[-1] for l in p.stdout.splitlines() if l.startswith("would measure"))
        check(todo == sorted(["copy.memcpy"] + list(s0)), "a dry run lists what node1 lacks: " + " ".join(todo))
        p = mpirun(4, [measure, "--quick"] + only, cache)
        check(p.returncode == 0, "the second run succeeds: " + p.stderr[-400:])
        f = files(cache)
        if len(f["node1"]) == 1:
            _, u0 = tables(f["node0"][0])
            _, u1 = tables(f["node1"][0])
            check(u0["copy.memcpy"] == t0["copy.memcpy"], "node0's copy table is kept, not measured again")
            check("copy.memcpy" in u1 and shared(u0) == shared(u1), "node1's file is whole again, shared tables equal")
        else:
            check(False, "node1's file is written again")

with tempfile.TemporaryDirectory() as cache:
    # One named file: rank 0 writes it, and says that the other node will not use it.
    out = os.path.join(cache, "one.json")
    p = mpirun(4, [measure, "--quick", "--only", "copy.", "--output", out], cache)
    check(p.returncode == 0 and os.path.exists(out) and not any(files(cache).values()),
          "--output writes one file, rank 0's: " + p.stderr[-300:])
    check("will find it foreign" in p.stderr, "--output across nodes says the other node will not use the file")

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
