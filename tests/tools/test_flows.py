#!/usr/bin/env python3
# tests/tools/test_flows.py: shunt-flows end to end: its table and CSV on the paper's setting (k = S / gcd(n, S), computed here), and its refusals of bad options.
import csv
import io
import math
import subprocess
import sys

tool = sys.argv[1]
failures = []


def run(*args):
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=120)


def check(cond, what):
    if not cond:
        failures.append(what)
        print("FAIL:", what)


# Every host of a leaf sends to the host at its index one leaf on (shift by a leaf): n flows per
# leaf, so the minimal split is S / gcd(n, S) when the leaf-spine links are the bottleneck
# (uplinks as fast as the NICs, n > S) or when only they count (--scope fabric).
for n, s, scope in [(12, 8, "all"), (6, 4, "all"), (5, 3, "all"), (4, 6, "fabric"), (16, 8, "all")]:
    r = run("--hosts", str(8 * n), "--hosts-per-leaf", str(n), "--spines", str(s), "--collective", "shift",
            "--shift", str(n), "--seeds", "8", "--scope", scope, "--csv", "-")
    check(r.returncode == 0, f"n={n} S={s}: exit {r.returncode}: {r.stderr}")
    rows = [row for row in csv.DictReader(io.StringIO(r.stdout[r.stdout.index("phase,"):]))
            if row.get("strategy")]
    total = {row["strategy"]: row for row in rows if row["phase"] == "total"}
    want = s // math.gcd(n, s)
    check(int(total["coordinated k-split"]["k"]) == want, f"n={n} S={s}: k {total['coordinated k-split']['k']}, want {want}")
    spray = float(total["spray"]["load_mean_s"])
    coord = float(total["coordinated k-split"]["load_mean_s"])
    ecmp = float(total["ecmp"]["load_mean_s"])
    check(abs(coord - spray) <= 1e-9 * spray, f"n={n} S={s}: coordinated {coord} != spray {spray}")
    check(ecmp > spray, f"n={n} S={s}: ECMP {ecmp} not above spraying {spray}")
    check(f"minimal k per phase: {want}" in r.stdout, f"n={n} S={s}: minimal k line")

# Every collective and placement runs.
for coll in ["hierarchical", "ring", "halving", "alltoall", "shift", "xor", "permutation"]:
    for place in ["block", "spread", "random"]:
        r = run("--hosts", "96", "--hosts-per-leaf", "8", "--spines", "4", "--rails", "2", "--collective", coll,
                "--placement", place, "--seeds", "3", "--fail", "1:2", "--per-phase")
        check(r.returncode == 0 and "whole collective" in r.stdout, f"{coll} {place}: exit {r.returncode} {r.stderr}")

# Bad options: exit 2 and a message naming the option.
for args, word in [([], "--hosts"), (["--hosts", "0"], "--hosts"), (["--hosts", "8", "--spines", "x"], "--spines"),
                   (["--hosts", "8", "--collective", "nope"], "nope"), (["--hosts", "8", "--fail", "3"], "--fail"),
                   (["--hosts", "8", "--bogus"], "--bogus")]:
    r = run(*args)
    check(r.returncode == 2 and word in r.stderr, f"{args}: exit {r.returncode}, stderr {r.stderr!r}")
# A failed link that is not in the fabric: a clear error, exit 1.
r = run("--hosts", "8", "--hosts-per-leaf", "4", "--fail", "9:0")
check(r.returncode == 1 and "failed link" in r.stderr, f"bad failed link: exit {r.returncode} {r.stderr!r}")

print("ok" if not failures else f"{len(failures)} failures")
sys.exit(1 if failures else 0)
