#!/usr/bin/env python3
"""tests/nccl/check_shunt_links.py: libshunt.so has no link-time dependency on NCCL or the CUDA runtime (it
loads into CPU-only MPI programs) and exports, of NCCL's names, exactly the functions it intercepts."""
import re
import subprocess
import sys

INTERCEPTED = """AllReduce ReduceScatter AllGather Broadcast Bcast Reduce Send Recv GroupStart GroupEnd CommInitRank
CommInitRankConfig CommInitRankScalable CommInitAll CommSplit CommShrink CommFinalize CommDestroy CommAbort""".split()


def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def main():
    lib = sys.argv[1]
    failures = []
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run("readelf", "-d", lib))
    bad = [n for n in needed if re.match(r"lib(cuda|cudart|nccl)", n)]
    if bad:
        failures.append("links libraries it must not: " + " ".join(bad))
    exported = set()
    for line in run("nm", "-D", "--defined-only", lib).splitlines():
        parts = line.split()
        # NCCL's names start with "nccl" (shunt's own entries, shunt_*_nccl, are not NCCL's).
        if len(parts) == 3 and parts[2].startswith("nccl"):
            exported.add(parts[2].split("@")[0])
    want = {"nccl" + n for n in INTERCEPTED}
    if exported != want:
        failures.append("NCCL names exported: " + " ".join(sorted(exported ^ want)) + " differ from the intercepted")
    for f in failures:
        print("FAIL:", f)
    print(f"NEEDED: {' '.join(needed)}; {len(exported)} NCCL functions exported")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
