#!/usr/bin/env python3
"""tests/nccl/check_exports.py: libnccl_double.so exports exactly NCCL's functions it implements, each with its
pnccl twin, depends on no CUDA, NCCL or MPI library (built with CUDA it carries the CUDA runtime statically, its
symbols hidden), and calls ncclBroadcast from ncclBcast through the PLT as NCCL 2.28 does (so a preloaded
ncclBroadcast sees the inner call)."""
import re
import subprocess
import sys

EXPECTED = """AllGather AllReduce AlltoAll Bcast Broadcast CommAbort CommCount CommCuDevice CommDeregister CommDestroy
CommFinalize CommGetAsyncError CommInitAll CommInitRank CommInitRankConfig CommInitRankScalable CommRegister CommShrink
CommSplit CommUserRank Gather
GetErrorString GetLastError GetUniqueId GetVersion GroupEnd GroupStart MemAlloc MemFree Recv RedOpCreatePreMulSum
RedOpDestroy Reduce ReduceScatter Scatter Send""".split()


def run(*cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def main():
    lib = sys.argv[1]
    failures = []
    defined = set()
    for line in run("nm", "-D", "--defined-only", lib).splitlines():
        parts = line.split()
        if len(parts) == 3:
            defined.add(parts[2].split("@")[0])
    want = {p + "nccl" + n for n in EXPECTED for p in ("", "p")}
    if defined - want:
        failures.append("exported but not expected: " + " ".join(sorted(defined - want)))
    if want - defined:
        failures.append("expected but not exported: " + " ".join(sorted(want - defined)))
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", run("readelf", "-d", lib))
    bad = [n for n in needed if re.match(r"lib(cuda|cudart|nccl|mpi|open-|mpich)", n)]
    if bad:
        failures.append("links libraries it must not: " + " ".join(bad))
    # ncclBcast and pncclBcast share their code; objdump names it after one of them.
    listing = run("objdump", "-d", "--no-show-raw-insn", lib)
    body = re.search(r"<p?ncclBcast>:\n(.*?)\n\n", listing, re.S)
    if body is None or "<ncclBroadcast@plt>" not in body.group(1):
        failures.append("ncclBcast does not call ncclBroadcast through the PLT")
    for f in failures:
        print("FAIL:", f)
    print(f"{len(defined)} symbols exported, NEEDED: {' '.join(needed)}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
