#!/usr/bin/env python3
"""tests/interpose/run_preload.py: runs an unmodified MPI program without and with libshunt.so preloaded
and requires identical stdout and clean stderr; also checks SHUNT_* handling and the tools.

  run_preload.py program --mpiexec M [--mpiexec-arg A]... --flavour F --lib L --shunt-run R [--ranks 1,2,4]
                 [--config-checks] PROGRAM [ARGS...]
  run_preload.py tools --shunt-info I --shunt-run R --lib L

Exit status: 0 pass, 1 fail, 77 skipped (the program itself reported a skip).
"""
import argparse
import os
import re
import subprocess
import sys

TIMEOUT = 240


class Failure(Exception):
    pass


def clean_env(extra=None):
    """The environment of a run: no SHUNT_* or LD_PRELOAD inherited, plus `extra`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SHUNT_") and k != "LD_PRELOAD"}
    env.update(extra or {})
    return env


class Launcher:
    def __init__(self, args):
        self.mpiexec = args.mpiexec
        self.mpiexec_args = args.mpiexec_arg or []
        self.flavour = args.flavour
        self.lib = os.path.abspath(args.lib)
        # A sanitizer build's runtime must be loaded before libshunt.so.
        self.preload = (args.preload_first + ":" if args.preload_first else "") + self.lib
        self.shunt_run = os.path.abspath(args.shunt_run)
        self.program = [os.path.abspath(args.command[0])] + args.command[1:]

    def run(self, ranks, how, env=None):
        """how: 'plain' (no preload), 'preload' (LD_PRELOAD passed to the ranks by the launcher),
        'shunt-run' (each rank started through the shunt-run script)."""
        cmd = [self.mpiexec] + self.mpiexec_args + ["-n", str(ranks)]
        if how == "preload":
            if self.flavour == "openmpi":
                cmd += ["-x", "LD_PRELOAD=" + self.preload]
            else:
                cmd += ["-genv", "LD_PRELOAD", self.preload]
        cmd += ([self.shunt_run] if how == "shunt-run" else []) + self.program
        try:
            p = subprocess.run(cmd, env=clean_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               timeout=TIMEOUT, text=True)
        except subprocess.TimeoutExpired:
            raise Failure(f"timed out after {TIMEOUT} s: {' '.join(cmd)}")
        # AddressSanitizer's one-time note on swapcontext (shunt's fibers annotate their switches
        # for it; .ci/sanitize) is the sanitizer's, not the program's output.
        p.stderr = ASAN_FIBER_NOTE.sub("", p.stderr)
        return p, " ".join(f"{k}={v}" for k, v in (env or {}).items()) + (" " if env else "") + " ".join(cmd)


ASAN_FIBER_NOTE = re.compile(r"^==\d+==WARNING: ASan doesn't fully support makecontext/swapcontext functions "
                             r"and may produce false positives in some cases!\n", re.M)


# A sanitizer's or the MPI launcher's own lines in a failed run's stderr, repeated at the end of the
# failure message: a CI log that keeps only a long message's last lines still shows why.
CAUSE = re.compile(r"^.*(?:==\d+==(?:ERROR|WARNING)|runtime error:|SUMMARY: \w+Sanitizer|LeakSanitizer|"
                   r"Direct leak of|Indirect leak of|Process name:|Exit code:|signal \d+|Segmentation fault|"
                   r"Aborted|MPI_ABORT|shunt\[rank \d+\]: (?:error|warning)|^\s+#[0-6] 0x).*$", re.M)


def describe(p, cmd):
    causes = CAUSE.findall(p.stderr)[:16]
    trailer = "\n  causes in stderr (repeated):\n" + "\n".join("    " + c.strip() for c in causes) if causes else ""
    return f"\n  command: {cmd}\n  exit {p.returncode}\n  stdout:\n{p.stdout}\n  stderr:\n{p.stderr}{trailer}"


def expect(cond, message, p=None, cmd=""):
    if not cond:
        raise Failure(message + (describe(p, cmd) if p is not None else ""))


def report_rows(stderr):
    """The summary table's data rows: call -> (calls, shunt, library, bytes), None for '-'."""
    rows = {}
    for m in re.finditer(r"^shunt\[rank 0\]:\s+(MPI_\w+)\s+(\d+)\s+(\d+|-)\s+(\d+|-)\s+(\d+|-)$", stderr, re.M):
        rows[m.group(1)] = tuple(None if x == "-" else int(x) for x in m.group(2, 3, 4, 5))
    return rows


def check_program(args):
    L = Launcher(args)
    ranks_list = [int(r) for r in args.ranks.split(",")]
    done = 0
    for n in ranks_list:
        base, cmd = L.run(n, "plain")
        if base.returncode == 77:
            print(f"skipped: the program reported a skip\n{base.stdout}")
            return 77
        expect(base.returncode == 0 and base.stderr == "", f"{n} ranks without shunt: must succeed quietly", base, cmd)
        expect(base.stdout.strip() != "", f"{n} ranks without shunt: no output", base, cmd)

        def same(what, how, env, stderr_ok=lambda s: s == ""):
            p, c = L.run(n, how, env)
            expect(p.returncode == 0, f"{n} ranks, {what}: exit status {p.returncode}", p, c)
            expect(p.stdout == base.stdout, f"{n} ranks, {what}: stdout differs from the run without shunt\n"
                   f"  without shunt:\n{base.stdout}", p, c)
            expect(stderr_ok(p.stderr), f"{n} ranks, {what}: unexpected stderr", p, c)
            return p, c

        same("preloaded, no SHUNT_* set", "preload", None)
        same("preloaded, SHUNT_DISABLE=1", "preload", {"SHUNT_DISABLE": "1"})
        if args.collectives is not None:
            done += check_collectives(args, n, same)
            continue
        if args.p2p is not None:
            done += check_p2p(args, n, same)
            continue
        same("preloaded, SHUNT_PACK=auto", "preload", {"SHUNT_PACK": "auto"})

        # Forced host packer with the summary: shunt must really have packed and unpacked.
        p, c = same("shunt-run, SHUNT_PACK=host SHUNT_REPORT=summary", "shunt-run",
                    {"SHUNT_PACK": "host", "SHUNT_REPORT": "summary"}, lambda s: True)
        rows = report_rows(p.stderr)
        expect("MPI_Pack" in rows and "MPI_Unpack" in rows, "no summary table on stderr", p, c)
        expect(all(line.startswith("shunt[rank 0]: ") for line in p.stderr.splitlines()),
               "the summary must come from rank 0 only", p, c)
        expect(rows["MPI_Pack"][1] > 0 and rows["MPI_Unpack"][1] > 0,
               "the summary shows no call handled by shunt's packer", p, c)
        expect(rows["MPI_Pack"][1] + rows["MPI_Pack"][2] == rows["MPI_Pack"][0], "summary columns do not add up", p, c)
        if args.library_calls is not None:  # with SHUNT_PACK=host only the listed calls may reach the library
            for call in ("MPI_Pack", "MPI_Unpack"):
                want = args.library_calls.get(call, 0) * n
                expect(rows[call][2] == want, f"{call}: {rows[call][2]} calls went to the library, expected {want}",
                       p, c)
        expect(rows["MPI_Finalize"][0] == n, f"summary counts {rows['MPI_Finalize'][0]} MPI_Finalize calls", p, c)

        # Forced library packer with per-rank lines: one line per rank, nothing by shunt.
        p, c = same("preloaded, SHUNT_PACK=library SHUNT_REPORT=rank", "preload",
                    {"SHUNT_PACK": "library", "SHUNT_REPORT": "rank"}, lambda s: True)
        lines = p.stderr.splitlines()
        expect(len(lines) == n and sorted(int(re.match(r"shunt\[rank (\d+)\]", x).group(1)) for x in lines) ==
               list(range(n)), "expected exactly one report line per rank", p, c)
        expect(all(re.search(r"MPI_Pack \d+ \(shunt 0, 0 bytes; library \d+\)", x) for x in lines) and
               all(re.search(r"MPI_Unpack \d+ \(shunt 0, 0 bytes; library \d+\)", x) for x in lines),
               "SHUNT_PACK=library must leave every pack to the library", p, c)
        done += 6

        if args.config_checks and n == ranks_list[-1]:
            bad = {"SHUNT_DISABLE": "maybe", "SHUNT_LOG": "loud", "SHUNT_REPORT": "7", "SHUNT_PACK": "host2",
                   "SHUNT_DISABEL": "1"}
            p, c = same("bad SHUNT_* values", "preload", bad, lambda s: True)
            lines = p.stderr.splitlines()
            expect(len(lines) == len(bad), f"expected exactly {len(bad)} warning lines (one per bad variable)", p, c)
            for name, value in bad.items():
                hits = [x for x in lines if re.search(rf"\b{name}\b", x)]
                expect(len(hits) >= 1 and hits[0].startswith("shunt[rank 0]: warning: config: "),
                       f"no warning from rank 0 naming {name}", p, c)
                if name != "SHUNT_DISABEL":
                    expect(f'"{value}"' in hits[0] and "accepted" in hits[0], f"the {name} warning must show the value "
                           "and what is accepted", p, c)
            expect(any("did you mean SHUNT_DISABLE" in x for x in lines), "no suggestion for SHUNT_DISABEL", p, c)

            p, c = same("SHUNT_LOG=info", "preload", {"SHUNT_LOG": "info"}, lambda s: True)
            echo = [x for x in p.stderr.splitlines() if "effective configuration" in x]
            expect(len(echo) == 1 and echo[0].startswith("shunt[rank 0]: config: "),
                   "rank 0 must echo the configuration exactly once", p, c)
            expect(re.search(r"^shunt\[rank 0\]:\s+SHUNT_LOG=info \(set\)$", p.stderr, re.M),
                   "the echo must show SHUNT_LOG=info", p, c)
            expect(not re.search(r"^shunt\[rank [1-9]\d*\]: config:", p.stderr, re.M),
                   "only rank 0 may echo the configuration", p, c)

            logfile = os.path.abspath(f"shunt-log-{os.getpid()}.txt")
            try:
                p, c = same("SHUNT_LOG=debug SHUNT_LOG_FILE", "preload",
                            {"SHUNT_LOG": "debug:type,decide", "SHUNT_LOG_FILE": logfile})
                with open(logfile) as f:
                    text = f.read()
                expect("effective configuration" in text and "type: commit" in text,
                       f"SHUNT_LOG_FILE did not receive the log:\n{text}", p, c)
            finally:
                if os.path.exists(logfile):
                    os.unlink(logfile)
            done += 3
    print(f"{os.path.basename(L.program[0])}: {done} runs matched the run without shunt at {args.ranks} ranks")
    return 0


COLLECTIVES = ["MPI_Allreduce", "MPI_Reduce", "MPI_Reduce_scatter_block", "MPI_Reduce_scatter", "MPI_Allgather",
               "MPI_Allgatherv", "MPI_Bcast", "MPI_Alltoall", "MPI_Alltoallv"]
FUSED = ["MPI_Alltoallw", "MPI_Neighbor_alltoallw"]


def nonblocking(call):
    """MPI_Iallreduce, MPI_Allreduce_init, ...: decided by the nonblocking plan."""
    return call.endswith("_init") or (call.startswith("MPI_I") and call[5:6].islower())


def check_collectives(args, n, same):
    """The runs of a collectives program at n ranks (after the plain, preloaded and disabled ones)."""
    # Forced shunt schedules on a virtual topology: every collective must really have run in shunt.
    p, c = same(f"shunt-run, SHUNT_COLL=shunt SHUNT_TOPOLOGY={args.collectives} SHUNT_REPORT=summary", "shunt-run",
                {"SHUNT_COLL": "shunt", "SHUNT_TOPOLOGY": args.collectives, "SHUNT_REPORT": "summary"}, lambda s: True)
    rows = report_rows(p.stderr)
    expect(all(line.startswith("shunt[rank 0]: ") for line in p.stderr.splitlines()),
           "the summary must come from rank 0 only", p, c)
    checked = args.coll_calls.split(",") if args.coll_calls else COLLECTIVES
    for call in checked:
        expect(call in rows, f"no {call} row in the summary", p, c)
        calls, by_shunt, library, _ = rows[call]
        expect(by_shunt + library == calls, f"{call}: summary columns do not add up", p, c)
        if n > 1:
            expect(by_shunt > 0, f"{call}: no call ran in shunt with SHUNT_COLL=shunt", p, c)
        else:
            expect(by_shunt == 0, f"{call}: a single rank has nothing for shunt to do", p, c)
        if n > 1 and call in FUSED:  # the fused collectives' decisions are in the report too
            m = re.search(rf"^shunt\[rank 0\]:\s+{call} on (\d+) communicators? of {n} ranks -> shunt's fused packing "
                          r"\(forced\) x (\d+) \(forced by SHUNT_COLL\)$", p.stderr, re.M)
            expect(m is not None and int(m.group(2)) > 0, f"{call}: the report must list the forced decision", p, c)
    # The cost model's choice (measuring both on first use), with its decisions logged.
    p, c = same("preloaded, SHUNT_COLL=auto SHUNT_LOG=decide SHUNT_REPORT=summary", "preload",
                {"SHUNT_COLL": "auto", "SHUNT_LOG": "decide", "SHUNT_TOPOLOGY": args.collectives,
                 "SHUNT_REPORT": "summary"}, lambda s: True)
    if args.not_set_up is not None:
        m = re.search(r"^shunt\[rank 0\]:\s+collectives to the library: (.*)$", p.stderr, re.M)
        counted = re.search(r"(?:^|, )not-set-up (\d+)", m.group(1)) if m else None
        expect(m is not None and int(counted.group(1) if counted else 0) == args.not_set_up * n,
               f"the summary must count {args.not_set_up * n} calls not set up ({args.not_set_up} a rank)", p, c)
    fused = [call for call in checked if call in FUSED]
    if n > 1 and fused:  # the fused collectives: one measured decision per communicator
        for call in fused:
            expect(re.search(rf"^shunt\[rank 0\]: decide: {call} on a communicator of \d+ ranks: (shunt's fused "
                             r"packing|the library), kept for the communicator \(library measured [0-9.e+-]+ us, "
                             r"shunt [0-9.e+-]+ us\)$", p.stderr, re.M),
                   f"SHUNT_LOG=decide must show {call} deciding by measuring", p, c)
            expect(re.search(rf"^shunt\[rank 0\]:\s+{call} on \d+ communicators? of {n} ranks -> (shunt's fused "
                             r"packing|the library) x \d+ \(library measured [0-9.e+-]+ us, shunt [0-9.e+-]+ us\)$",
                             p.stderr, re.M),
                   f"SHUNT_REPORT must list {call}'s measured decision", p, c)
    elif n > 1 and any(nonblocking(call) for call in checked):
        # Nonblocking and persistent calls say where their decision comes from.
        for call in (c for c in checked if nonblocking(c)):
            expect(re.search(rf"^shunt\[rank 0\]: decide: {call} of \d+ bytes on p\d+\S*: (the library|shunt's schedule"
                             r"( over \S+| flat)?) \(nonblocking: (the blocking calls' decision|the model's plan, agreed "
                             r"when the communicator was set up)\)$", p.stderr, re.M),
                   f"SHUNT_LOG=decide must show {call}'s decisions", p, c)
    elif n > 1:
        # shunt's schedule says which levels it runs over when the shape has levels, and the
        # predictions of each set of levels when more than one competed.
        expect(re.search(r"^shunt\[rank 0\]: decide: MPI_Allreduce of \d+ bytes on p\d+\S*: (the library|shunt's schedule"
                         r"( over \S+| flat)?) \(library measured [0-9.e+-]+ us, hierarchical measured [0-9.e+-]+ us"
                         r"(; shunt's levels predicted:( \S+ [0-9.e+-]+ us)+)?\)$", p.stderr, re.M),
               "SHUNT_LOG=decide must show the measured collective decisions", p, c)
    # Forced library: nothing by shunt.
    p, c = same("preloaded, SHUNT_COLL=library SHUNT_REPORT=rank", "preload",
                {"SHUNT_COLL": "library", "SHUNT_REPORT": "rank"}, lambda s: True)
    lines = p.stderr.splitlines()
    expect(len(lines) == n and all("collectives by shunt: 0 bytes" in x for x in lines),
           "SHUNT_COLL=library must leave every collective to the library", p, c)
    return 5


P2P_SENDS = ["MPI_Send", "MPI_Isend", "MPI_Ssend", "MPI_Rsend", "MPI_Bsend", "MPI_Issend", "MPI_Irsend", "MPI_Ibsend",
             "MPI_Sendrecv", "MPI_Sendrecv_replace", "MPI_Send_init", "MPI_Ssend_init", "MPI_Rsend_init",
             "MPI_Bsend_init", "MPI_Start", "MPI_Startall"]
P2P_RECVS = ["MPI_Recv", "MPI_Irecv", "MPI_Recv_init", "MPI_Mrecv", "MPI_Imrecv"]
P2P_COMPLETIONS = ["MPI_Wait", "MPI_Waitall", "MPI_Waitany", "MPI_Waitsome", "MPI_Test", "MPI_Testall", "MPI_Testany",
                   "MPI_Testsome", "MPI_Request_free"]


def p2p_totals(stderr):
    m = re.search(r"^shunt\[rank 0\]:\s+point-to-point: (\d+) sends \((\d+) bytes\) and (\d+) receives \((\d+) bytes\) "
                  r"by shunt$", stderr, re.M)
    return tuple(int(x) for x in m.groups()) if m else None


def check_p2p(args, n, same):
    """The runs of a point-to-point program at n ranks (after the plain, preloaded and disabled ones)."""
    same("preloaded, SHUNT_PACK=auto", "preload", {"SHUNT_PACK": "auto"})
    # Forced host packer: every data-moving call on a derived type and every completion call
    # that finished one of its requests must show calls handled by shunt.
    p, c = same("shunt-run, SHUNT_PACK=host SHUNT_REPORT=summary", "shunt-run",
                {"SHUNT_PACK": "host", "SHUNT_REPORT": "summary"}, lambda s: True)
    rows = report_rows(p.stderr)
    expect(all(line.startswith("shunt[rank 0]: ") for line in p.stderr.splitlines()),
           "the summary must come from rank 0 only", p, c)
    wanted = P2P_SENDS + P2P_RECVS + P2P_COMPLETIONS if args.p2p == "all" else args.p2p.split(",")
    for call in wanted:
        expect(call in rows, f"no {call} row in the summary", p, c)
        calls, by_shunt, library, _ = rows[call]
        expect(by_shunt + library == calls, f"{call}: summary columns do not add up", p, c)
        expect(by_shunt > 0, f"{call}: no call handled by shunt with SHUNT_PACK=host", p, c)
    totals = p2p_totals(p.stderr)
    expect(totals is not None and all(x > 0 for x in totals), "the summary shows no point-to-point bytes by shunt", p, c)
    # The cost model's choice, with the per-rank report.
    p, c = same("preloaded, SHUNT_PACK=auto SHUNT_REPORT=rank", "preload", {"SHUNT_PACK": "auto", "SHUNT_REPORT": "rank"},
                lambda s: True)
    lines = p.stderr.splitlines()
    expect(len(lines) == n and all("point-to-point by shunt: " in x for x in lines), "expected one report line per rank "
           "with the point-to-point counts", p, c)
    # Forced library: nothing by shunt.
    p, c = same("preloaded, SHUNT_PACK=library SHUNT_REPORT=rank", "preload",
                {"SHUNT_PACK": "library", "SHUNT_REPORT": "rank"}, lambda s: True)
    lines = p.stderr.splitlines()
    expect(len(lines) == n and all("point-to-point by shunt: 0 sends (0 bytes), 0 receives (0 bytes)" in x
                                   for x in lines), "SHUNT_PACK=library must leave every point-to-point call to the "
           "library", p, c)
    return 4


def check_tools(args):
    info = os.path.abspath(args.shunt_info)

    def tool(argv, env=None):
        p = subprocess.run(argv, env=clean_env(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           timeout=60)
        return p, " ".join(argv)

    p, c = tool([info, "--config"])
    expect(p.returncode == 0 and p.stderr == "", "shunt-info --config must succeed quietly", p, c)
    for name in ["SHUNT_DISABLE", "SHUNT_LOG", "SHUNT_LOG_FILE", "SHUNT_REPORT", "SHUNT_PACK", "SHUNT_COLL",
                 "SHUNT_CUDA_AWARE"]:
        m = re.search(rf"^{name} \((\S[^,]*), default ([^)]*)\)\n    current:  (.*)\n    (.+)\n    accepted: (.+)$",
                      p.stdout, re.M)
        expect(m is not None, f"shunt-info --config: no complete entry for {name}", p, c)
        expect(m.group(3).endswith(" (default)"), f"{name} must show its default", p, c)
    p, c = tool([info, "--config"], {"SHUNT_REPORT": "rank", "SHUNT_PACK": "fast", "SHUNT_BOGUS": "1"})
    expect(p.returncode == 0, "shunt-info --config with bad values must still succeed", p, c)
    expect(re.search(r"^SHUNT_REPORT .*\n    current:  rank \(set\)$", p.stdout, re.M),
           "SHUNT_REPORT=rank must show as set", p, c)
    expect(re.search(r'^SHUNT_PACK .*\n    current:  auto \(the value "fast" is not valid: default used\)$', p.stdout,
                     re.M), "a bad SHUNT_PACK must show the rejected value", p, c)
    warnings = p.stderr.splitlines()
    expect(len(warnings) == 2 and any("SHUNT_PACK" in w for w in warnings) and
           any("SHUNT_BOGUS is not a shunt variable" in w for w in warnings),
           "expected one warning per bad variable on stderr", p, c)
    p, c = tool([info, "--help"])
    expect(p.returncode == 0 and "--config" in p.stdout, "shunt-info --help", p, c)
    p, c = tool([info, "--version"])
    expect(p.returncode == 0 and re.match(r"shunt-info \(shunt\) \d+\.\d+", p.stdout), "shunt-info --version", p, c)
    p, c = tool([info, "--frobnicate"])
    expect(p.returncode == 2 and "unknown option '--frobnicate'" in p.stderr and p.stdout == "",
           "an unknown option must fail with exit status 2", p, c)

    # The topology and collective explanations initialise MPI (a singleton here: one rank).
    p, c = tool([info, "--topology"], {"SHUNT_TOPOLOGY": "node=1"})
    expect(p.returncode == 0 and p.stdout.startswith("topology 'node=1' of 1 rank") and
           "cost model shape: p1" in p.stdout and re.search(r"^0\s+\S+", p.stdout, re.M), "shunt-info --topology", p, c)
    p, c = tool([info, "--topology"], {"SHUNT_TOPOLOGY": "node=(1"})
    expect(p.returncode == 1 and "topology description 'node=(1'" in p.stderr, "shunt-info --topology must reject a bad "
           "SHUNT_TOPOLOGY with the reason", p, c)
    p, c = tool([info, "--explain", "allreduce", "1048576"])
    expect(p.returncode == 0 and re.search(r"^allreduce of 1048576 bytes on MPI_COMM_WORLD, shape p1", p.stdout, re.M) and
           re.search(r"^  library\s+predicted\s+[0-9.]+ us", p.stdout, re.M) and
           re.search(r"^  hierarchical\s+predicted\s+[0-9.]+ us", p.stdout, re.M), "shunt-info --explain allreduce", p, c)
    # Rows of 64 B or more: whether shunt's packer would stream them, against this machine's
    # threshold (at least 16 MiB): 64 KiB never does, 1 GiB of output always passes any threshold
    # below it.
    for size, verb in (("65536", "does not store"), ("1073741824", "stores")):
        p, c = tool([info, "--explain", "unpack", size, "256"])
        m = re.search(r"^  shunt's packer (does not store|stores) rows non-temporally here \(streaming stores: from (\d+) MiB",
                      p.stdout, re.M)
        expect(p.returncode == 0 and m and int(m.group(2)) >= 16 and
               m.group(1) == (verb if int(m.group(2)) < 1024 else "does not store"),
               f"shunt-info --explain unpack {size} 256 must say whether the rows stream", p, c)
    # NCCL collectives: no table, NCCL keeps the call; SHUNT_NCCL=shunt forces shunt's schedule.
    p, c = tool([info, "--explain", "nccl-allreduce", "67108864", "8", "4"])
    expect(p.returncode == 0 and re.search(r"^nccl allreduce of 67108864 bytes on 8 ranks in nodes of 4", p.stdout, re.M)
           and re.search(r"^  library\s+no table nccl\.allreduce\.library\.r8n2$", p.stdout, re.M) and
           re.search(r"^  -> NCCL \(without measured tables of both", p.stdout, re.M), "shunt-info --explain nccl-allreduce",
           p, c)
    p, c = tool([info, "--explain", "nccl-reduce", "1024"], {"SHUNT_NCCL": "shunt"})
    expect(p.returncode == 0 and "-> shunt's schedule over node+rail (forced by SHUNT_NCCL)" in p.stdout,
           "shunt-info --explain nccl-reduce with SHUNT_NCCL=shunt", p, c)
    p, c = tool([info, "--explain", "nccl-allreduce", "1024", "8", "3"])
    expect(p.returncode == 2 and p.stdout == "", "shunt-info --explain nccl-... with nodes not dividing the ranks", p, c)
    p, c = tool([info, "--explain", "allreduce", "-5"])
    expect(p.returncode == 2 and p.stdout == "", "shunt-info --explain with a bad size must fail with usage", p, c)

    run = os.path.abspath(args.shunt_run)
    p, c = tool([run, "--library"])
    expect(p.returncode == 0 and os.path.samefile(p.stdout.strip(), args.lib),
           "shunt-run --library must find the library of this build", p, c)
    p, c = tool([run, "sh", "-c", 'printf %s "$LD_PRELOAD"'], {"LD_PRELOAD": "/other.so"})
    # A sanitizer build puts its runtime first, then libshunt.so.
    parts = p.stdout.split(":")
    first = [args.preload_first] if args.preload_first else []
    expect(p.returncode == 0 and len(parts) == len(first) + 2 and parts[:len(first)] == first and
           parts[-1] == "/other.so" and os.path.samefile(parts[len(first)], args.lib),
           "shunt-run must prepend libshunt.so (after a sanitizer build's runtime) to LD_PRELOAD", p, c)
    p, c = tool([run])
    expect(p.returncode == 2 and "usage" in p.stderr, "shunt-run without a program must fail with usage", p, c)
    p, c = tool([run, "--bogus"])
    expect(p.returncode == 2 and "unknown option" in p.stderr, "shunt-run with an unknown option must fail", p, c)
    print("shunt-info and shunt-run: all checks passed")
    return 0


def parse_library_calls(text):
    out = {}
    for item in filter(None, text.split(",")):
        name, _, count = item.partition("=")
        out[name] = int(count)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="mode", required=True)
    pr = sub.add_parser("program")
    pr.add_argument("--mpiexec", required=True)
    pr.add_argument("--mpiexec-arg", action="append")
    pr.add_argument("--flavour", choices=["openmpi", "mpich"], required=True)
    pr.add_argument("--lib", required=True)
    pr.add_argument("--preload-first", default="",
                    help="a library to load before libshunt.so (a sanitizer build's runtime)")
    pr.add_argument("--shunt-run", required=True)
    pr.add_argument("--ranks", default="1,2,4")
    pr.add_argument("--config-checks", action="store_true")
    pr.add_argument("--library-calls", type=parse_library_calls, default=None,
                    help="with SHUNT_PACK=host, the calls per rank that must reach the library, e.g. "
                    "MPI_Pack=1 (unlisted: 0); without the option this is not checked")
    pr.add_argument("--collectives", metavar="TOPOLOGY", default=None,
                    help="the program tests collectives: check them with SHUNT_COLL on this SHUNT_TOPOLOGY "
                    "instead of the packing checks")
    pr.add_argument("--coll-calls", default=None, metavar="CALLS",
                    help="with --collectives: the comma list of collectives the program calls (default: every "
                    "planned collective)")
    pr.add_argument("--not-set-up", type=int, default=None, metavar="N",
                    help="with --collectives: the nonblocking collective calls per rank the program makes on a "
                    "communicator before a blocking collective has set it up; the SHUNT_COLL=auto summary must "
                    "count exactly N per rank as not-set-up (more: calls kept that way after the setup)")
    pr.add_argument("--p2p", nargs="?", const="all", default=None, metavar="CALLS",
                    help="the program tests point-to-point calls: check that shunt handled them with SHUNT_PACK=host "
                    "instead of the packing checks; CALLS: a comma list of the calls that must show calls handled "
                    "by shunt (default: every point-to-point and completion call)")
    pr.add_argument("command", nargs=argparse.REMAINDER)
    tl = sub.add_parser("tools")
    tl.add_argument("--shunt-info", required=True)
    tl.add_argument("--shunt-run", required=True)
    tl.add_argument("--lib", required=True)
    tl.add_argument("--preload-first", default="", help="what shunt-run must put before libshunt.so")
    args = ap.parse_args()
    if args.mode == "program":
        if args.command[:1] == ["--"]:
            args.command = args.command[1:]
        if not args.command:
            ap.error("program: no PROGRAM given")
    try:
        return check_program(args) if args.mode == "program" else check_tools(args)
    except Failure as f:
        print(f"FAIL: {f}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
