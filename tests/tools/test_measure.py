#!/usr/bin/env python3
# tests/tools/test_measure.py: shunt-measure end to end: writes a valid model, is incremental, honours
# its budget, validates predictions on held-out sizes and checks pack decisions against measurements.
import json, os, re, subprocess, sys, tempfile

mpiexec, mpiexec_args, measure, info = sys.argv[1], sys.argv[2].split(), sys.argv[3], sys.argv[4]
env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
failures = []

def run(args, ranks=2, **kw):
    cmd = [mpiexec] + mpiexec_args + ["-n", str(ranks), measure] + args
    p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, **kw)
    return p

def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)

with tempfile.TemporaryDirectory() as tmp:
    model = os.path.join(tmp, "sub", "model.json")
    # A budget far too small for everything: partial tables, saved, and a clear note.
    p = run(["--quick", "--budget", "0.001", "--output", model])
    check(p.returncode == 0, "budgeted run succeeds: " + p.stderr[-300:])
    check("budget reached" in p.stderr, "budgeted run says it stopped early")
    first = json.load(open(model))["tables"]
    check(0 < len(first) < 20, f"budgeted run measured some tables ({len(first)})")
    check((os.stat(model).st_mode & 0o777) == 0o600, "model file is readable by the user only")

    # Incremental: the rest is filled, nothing already measured is measured again.
    p = run(["--quick", "--dry-run", "--output", model])
    todo = [l for l in p.stdout.splitlines() if l.startswith("would measure")]
    check(not any(t.split()[-1] in first for t in todo), "dry run skips tables already in the file")
    p = p_full = run(["--quick", "--output", model, "--validate", "--decisions"])
    check(p.returncode == 0, "full quick run succeeds: " + p.stderr[-300:])
    print(p.stdout)
    tables = json.load(open(model))["tables"]
    check(all(tables[k] == v for k, v in first.items()), "tables measured earlier are kept unchanged")
    check("p2p.node.hh" in tables and "copy.memcpy" in tables and "pack.shunt.b1" in tables,
          "model has point-to-point, copy and pack tables")
    check(any(k.startswith("coll.allreduce.library.p2") for k in tables) and
          any(k.startswith("coll.allreduce.hierarchical.p2") for k in tables),
          "model has both methods' collective tables for this job's shape")
    p2 = run(["--quick", "--dry-run", "--output", model])
    check("would measure" not in p2.stdout, "after a complete run nothing is left to measure")

    # --force with --only measures the selected tables again and keeps every other table.
    p = run(["--quick", "--output", model, "--force", "--only", "copy.memcpy"])
    again = json.load(open(model))["tables"]
    check(p.returncode == 0 and set(again) == set(tables) and
          all(again[k] == v for k, v in tables.items() if k != "copy.memcpy"),
          "--force --only re-measures the selected table and keeps the others: " + p.stderr[-300:])
    tables = again

    # Validation: held-out sizes. The goal is 15% median error on a quiet machine; under a loaded
    # CI box the bound here only catches a broken model (wrong units, wrong interpolation). When
    # the machine itself changed since the tables were measured (the tables' own sizes, measured
    # again beside the held-out ones, are off by more than 25%), the held-out sizes are judged
    # against a table of that same pass instead, so that a drifting 2-core box is not mistaken
    # for a wrong model, while a wrong interpolation still fails.
    # A group judged not sane has its tables measured again (--force --only) and is validated
    # again, up to twice: a burst of load from a neighbour on a shared CI box can spoil the table
    # itself (then every validation against it fails, however quiet the box is later, while its
    # drift can still read under 25%: CI, stops 27 and 30) or one validation pass, but a wrong
    # model fails every pass, measured afresh or not. Each verdict names the figures it was
    # judged on.
    group_tables = {"pack+copy": ["pack.", "unpack.", "copy.memcpy"], "p2p": ["p2p."], "collectives": ["coll."]}
    def sane_in(out, what, bound):
        m = re.search(r"validate " + re.escape(what) +
                      r" median_ape=([\d.]+)% points=\d+ drift=([\d.]+)% same_pass_ape=([\d.]+)%", out)
        if m is None:
            return False, "no validation line"
        ape, drift, same = map(float, m.groups())
        return ape < bound or (drift > 25 and same < bound), m.group(0)
    def sane(what, bound=60):
        seen, out = [], p_full.stdout
        for attempt in range(3):
            if attempt:
                args = ["--quick", "--output", model, "--validate", "--force"]
                for prefix in group_tables[what]:
                    args += ["--only", prefix]
                v = run(args)
                out = v.stdout if v.returncode == 0 else ""
                seen.append("measured again")
            ok, line = sane_in(out, what, bound)
            seen.append(line)
            if ok:
                break
        return ok, f"{what} ({'; '.join(seen)})"
    ok, line = sane("pack+copy")
    check(ok, "pack/copy prediction error on held-out sizes is sane: " + line)
    ok, line = sane("p2p")
    check(ok, "point-to-point prediction error on held-out sizes is sane: " + line)
    m = re.search(r"decisions fastest=(\d+)/(\d+) worst_slowdown=([\d.]+)", p_full.stdout)
    check(m is not None and int(m.group(1)) >= int(m.group(2)) // 2 and float(m.group(3)) < 3,
          "pack decisions mostly pick the fastest method")

    ok, line = sane("collectives", 100)
    check(ok, "collective prediction error on held-out sizes is reported: " + line)
    m = re.search(r"collective decisions fastest=(\d+)/(\d+) worst_slowdown=([\d.]+)", p_full.stdout)
    check(m is not None and int(m.group(2)) == 18, "collective decisions are compared with both methods measured")

    # shunt-info validates the file; a corrupt or foreign file is refused with a reason.
    p = subprocess.run([info, "--model", model], capture_output=True, text=True, env=env)
    check(p.returncode == 0 and "valid shunt model" in p.stdout, "shunt-info --model accepts the file")
    bad = os.path.join(tmp, "bad.json")
    open(bad, "w").write('{"schema": "shunt-model", "version": 1, "identity": {"host": "elsewhere", "gpu": "none", "mpi": "x"}, "tables": {}}')
    p = subprocess.run([info, "--model", bad], capture_output=True, text=True, env=env)
    check(p.returncode == 1 and "FOREIGN" in p.stdout, "shunt-info --model flags a foreign file")
    open(bad, "w").write('{"schema": "shunt-model", "version": 1, "tables": {"x": [[1, 2]]}}')
    p = subprocess.run([info, "--model", bad], capture_output=True, text=True, env=env)
    check(p.returncode == 1 and "corrupt" in p.stderr, "shunt-info --model refuses a corrupt file")
    p = subprocess.run([info, "--explain", "pack", "65536", "4"], capture_output=True, text=True,
                       env=dict(env, SHUNT_MODEL=model))
    check(p.returncode == 0 and "<- chosen" in p.stdout and "measured model" in p.stdout,
          "shunt-info --explain uses the measured model and names the choice")
    p = run(["--bogus"], ranks=1)
    check(p.returncode == 2 and "unknown option" in p.stderr, "bad option gives a clear error")

print(f"{len(failures)} failed")
sys.exit(1 if failures else 0)
