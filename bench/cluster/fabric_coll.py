#!/usr/bin/env python3
# bench/cluster/fabric_coll.py: Open MPI's allreduce and alltoall across the emulated leaf-spine, plain, with shunt's hashed lanes and with its pinned lanes, interleaved jobs, against the flow model.
"""Runs inside bench/cluster/fabric.sh --plane-interfaces (FABRIC_DIR set):

    fabric.sh --ack-priority --plane-interfaces --leaves 4 --hosts-per-leaf 2 --spines 2 --rate 25mbit -- \\
        bench/cluster/fabric_coll.py --program build/bench/fabric_coll --library build/interpose/libshunt.so

Each trial runs every (collective, mode) once, modes interleaved: `plain` is Open MPI alone (one
TCP connection per peer on plane 0, hashed by the leaves), `hashed` and `pinned` preload shunt
with SHUNT_FLOW=hashed / pinned and SHUNT_FABRIC describing this fabric (SHUNT_COLL=library: the
library's algorithm runs in every mode, only the lanes differ); `hashed:K` forces K lanes and
`auto` is SHUNT_FLOW=auto (pinned on this fabric, whose hosts have the plane interfaces); a mode
with `+COLL` (`pinned+shunt`, `plain+shunt`: shunt preloaded, SHUNT_FLOW=off) sets SHUNT_COLL=COLL
instead, so that shunt's own schedule runs where it applies. Every
job is a new mpirun, so ECMP hashes new connections each time; a job past --job-timeout, or one
that ends without a result, is torn down (every process in the hosts' namespaces) and run once
more, then the run fails saying so. Open MPI's algorithms are fixed
(coll_tuned: ring or Rabenseifner allreduce, pairwise alltoall) so the model knows the steps, and
the TCP component's put protocol is off in every mode (with it, Open MPI 4.1.4 moves a
bidirectional exchange on one connection at about half the link rate per direction, which would
flatter any mode with more connections). --tcp-eager-kib sends messages up to that size without
Open MPI's rendezvous, in every mode: with it, a receiver's go-ahead for a message waits behind
the receiver's own data to the sender on their one connection, so a pairwise exchange whose two
sends start at different times (the Rabenseifner allreduce's steps, which have no barrier
between them) runs one direction after the other; the model has no such protocol step. Prints
every job, then per collective and mode: the best time (mean over trials), measured / model on
the probed paths, / spraying, and the ratio to plain.

--smoke (CI): one alltoall plain and with SHUNT_FLOW=auto, small, each job under 60 s. Fails only
on what cannot flake: a wrong element in any call's result, a pinned mode whose hosts are not on
their receive planes (every rank's TCP connections bound to them), a probe whose bytes crossed a
spine its receiver's planes do not name, or a job that timed out or died twice. Times are
printed, never failed on.
"""
import argparse
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
OPS = {  # name: (fabric_coll --op, coll_tuned parameter, algorithm number)
    "allreduce-rabenseifner": ("allreduce-rabenseifner", "coll_tuned_allreduce_algorithm", 6),
    "allreduce-ring": ("allreduce-ring", "coll_tuned_allreduce_algorithm", 4),
    "alltoall": ("alltoall", "coll_tuned_alltoall_algorithm", 2),
}
NO_PUT = "send,inplace,need-ack,need-csum,hetero-rdma"


def read_fabric():
    d = {"hosts": []}
    with open(os.path.join(os.environ["FABRIC_DIR"], "fabric.txt")) as f:
        for line in f:
            w = line.split()
            if not w:
                continue
            if w[0] in ("leaves", "hosts_per_leaf", "spines", "rate_bit_per_s"):
                d[w[0]] = int(w[1])
            elif w[0] == "planes":
                d["planes"] = w[1]
            elif w[0] == "host":
                d["hosts"].append((int(w[1]), int(w[2])))
                d.setdefault("host_ns", []).append(w[3])
    return d


def pinned_mode(mode):
    """Modes whose lanes must be on the hosts' receive planes here (auto pins where planes exist)."""
    return mode.startswith("pinned") or mode.split("+")[0] == "auto"


def tear_down_job(d, proc):
    """Ends a job: its launcher's process group, then every process left in the hosts' namespaces
    (only the job's ranks and daemons run there), TERM then KILL. Returns the output not yet read."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        for ns in d.get("host_ns", []):
            pids = subprocess.run(["ip", "netns", "pids", ns], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                  text=True).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), sig)
                except (ProcessLookupError, ValueError):
                    pass
        if sig == signal.SIGTERM:
            time.sleep(1)
    try:
        return proc.communicate(timeout=10)[0] or ""
    except (subprocess.TimeoutExpired, ValueError):
        return ""


def shunt_fabric(d):
    leaves = "|".join(",".join("l%dh%d" % (l, i) for i in range(d["hosts_per_leaf"])) for l in range(d["leaves"]))
    spec = "spines=%d;leaves={%s}" % (d["spines"], leaves)
    if d.get("planes") == "interfaces":
        spec += ";planes=pl"
    return spec


def run_job(args, d, op, mode, mib, trial):
    ranks = d["leaves"] * d["hosts_per_leaf"]
    prog_op, param, algo = OPS[op]
    cmd = [os.path.join(HERE, "fabric-mpirun"), "-n", str(ranks), "--mca", "btl_tcp_flags", NO_PUT,
           "--mca", "coll_tuned_use_dynamic_rules", "1", "--mca", param, str(algo), "-x", "FABRIC_DIR"]
    if args.tcp_eager_kib > 0:
        eager = str(args.tcp_eager_kib * 1024)
        cmd += ["--mca", "btl_tcp_eager_limit", eager, "--mca", "btl_tcp_max_send_size", eager]
    lanes, _, coll = mode.partition("+")
    if mode != "plain":
        cmd += ["-x", "LD_PRELOAD=" + args.library, "-x", "SHUNT_FLOW=" + ("off" if lanes == "plain" else lanes),
                "-x", "SHUNT_FABRIC=" + shunt_fabric(d), "-x", "SHUNT_COLL=" + (coll or "library")]
    cmd += [args.program, "--op", prog_op, "--mib", str(mib), "--iters", str(args.iters), "--probe-kib",
            str(args.probe_kib), "--cal-kib", str(args.cal_kib), "--label", "%s/%s/%d" % (op, mode, trial)]
    for attempt in (1, 2):
        t0 = time.time()
        # A session of its own: the launcher's process group can be ended without this script.
        p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            out, _ = p.communicate(timeout=args.job_timeout)
            why = "exit %d" % p.returncode
        except subprocess.TimeoutExpired:
            out, why = tear_down_job(d, p), "timed out after %d s" % args.job_timeout
        m = re.search(r"^result (.*)$", out, re.M)
        if p.returncode == 0 and m:
            break
        tear_down_job(d, p)  # whatever a failed job left in the hosts
        sys.stdout.write(out)
        print("job %s %s (attempt %d): %s, no result%s" % (
            op, mode, attempt, why, "; torn down, running it once more" if attempt == 1 else ""))
        sys.stdout.flush()
    else:
        raise SystemExit("fabric_coll.py: job %s %s failed twice (last: %s, limit %d s a job); Open MPI across the "
                         "emulated fabric did not finish: see the output above" % (op, mode, why, args.job_timeout))
    r = {}
    for kv in m.group(1).split():
        k, v = kv.split("=", 1)
        try:
            r[k] = float(v)
        except ValueError:
            r[k] = v
    r["wall"] = time.time() - t0
    paths = re.search(r"^paths (.*)$", out, re.M)
    r["paths"] = paths.group(1) if paths else ""
    return r


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--program", required=True, help="the fabric_coll executable")
    ap.add_argument("--library", required=True, help="libshunt.so")
    ap.add_argument("--ops", default="allreduce-rabenseifner,alltoall,allreduce-ring")
    ap.add_argument("--modes", default="plain,hashed,pinned")
    ap.add_argument("--tcp-eager-kib", type=int, default=0,
                    help="Open MPI's TCP eager limit in every mode (0: the library's)")
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--iters", type=int, default=4)
    ap.add_argument("--allreduce-mib", type=float, default=8)
    ap.add_argument("--alltoall-mib", type=float, default=1)
    ap.add_argument("--probe-kib", type=int, default=512)
    ap.add_argument("--cal-kib", type=int, default=4096, help="the calibration flow's size")
    ap.add_argument("--job-timeout", type=int, default=300, help="seconds a job may run (then torn down, run once more)")
    ap.add_argument("--verbose", action="store_true", help="print each job's probed paths")
    ap.add_argument("--smoke", action="store_true",
                    help="CI: one small alltoall plain and with SHUNT_FLOW=auto; exit 1 on a wrong result, lanes "
                         "not on the receive planes, a pinned sub-flow off them, or a job that failed twice; "
                         "times are only printed")
    args = ap.parse_args()
    args.program, args.library = os.path.abspath(args.program), os.path.abspath(args.library)
    if "FABRIC_DIR" not in os.environ:
        raise SystemExit("fabric_coll.py: run me inside bench/cluster/fabric.sh --plane-interfaces")
    d = read_fabric()
    if args.smoke:
        args.ops, args.modes, args.trials, args.iters, args.alltoall_mib, args.probe_kib, args.cal_kib = \
            "alltoall", "plain,auto", 1, 2, 0.25, 128, 512
        args.job_timeout = min(args.job_timeout, 60)
    ops = args.ops.split(",")
    modes = args.modes.split(",")
    for op in ops:
        if op not in OPS:
            raise SystemExit("fabric_coll.py: unknown op %s (%s)" % (op, ", ".join(OPS)))
    print("fabric: %d leaves x %d hosts, %d spines, %.0f Mbit/s links, planes on %s; SHUNT_FABRIC=%s" %
          (d["leaves"], d["hosts_per_leaf"], d["spines"], d["rate_bit_per_s"] / 1e6, d.get("planes", "addresses"),
           shunt_fabric(d)))
    results = {}
    ok = True
    hdr = "%-24s %-9s %5s %5s %8s %8s %8s %8s %8s %8s %6s %-16s" % (
        "collective", "mode", "trial", "lanes", "best s", "median s", "model s", "spray s", "ecmp s", "x model",
        "job s", "paths")
    print(hdr)
    for t in range(args.trials):
        for op in ops:
            mib = args.alltoall_mib if op == "alltoall" else args.allreduce_mib
            for mode in modes:
                r = run_job(args, d, op, mode, mib, t)
                results.setdefault((op, mode), []).append(r)
                paths = "ok" if r["paths_clean"] == 1 else "OFF"
                if r["pinned_paths"] == 1:
                    paths += ",pin"
                elif r["pinned_paths"] == 0:
                    paths += ",PIN-OFF"
                if pinned_mode(mode):
                    paths += ",planes" if r["planes_set_up"] == 1 else ",NO-PLANES"
                print("%-24s %-9s %5d %5d %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %6.1f %-16s" % (
                    op, mode, t + 1, r["lanes"], r["best"], r["median"], r["model"], r["spray"], r["ecmp"],
                    r["best"] / r["model"], r["wall"], paths))
                if args.verbose:
                    print("    " + r["paths"])
                sys.stdout.flush()
                if r["correct"] != 1:
                    print("  wrong result")
                    ok = False
                if pinned_mode(mode) and r["planes_set_up"] != 1:
                    print("  the pinned lanes are not set up: %d of the ranks' %d connections to other hosts are on "
                          "their receive planes (or a host's planes are not (i k + j) mod S)" %
                          (r["sockets_on_planes"], r["sockets"]))
                    ok = False
                if pinned_mode(mode) and r["pinned_paths"] != 1:
                    print("  a pinned sub-flow crossed a spine its receiver's planes do not name")
                    ok = False
    print("\nsummary (means over %d trial%s; x model: best time over the model's time for the probed paths):" %
          (args.trials, "" if args.trials == 1 else "s"))
    print("%-24s %-9s %5s %8s %8s %10s %8s %8s %9s" % ("collective", "mode", "lanes", "best s", "x model",
                                                      "worst dev", "x spray", "model's", "vs plain"))
    for op in ops:
        base = results.get((op, "plain"))
        plain_best = sum(r["best"] for r in base) / len(base) if base else None
        for mode in modes:
            rs = results[(op, mode)]
            best = sum(r["best"] for r in rs) / len(rs)
            xm = sum(r["best"] / r["model"] for r in rs) / len(rs)
            dev = max(abs(r["best"] / r["model"] - 1) for r in rs)
            spray = sum(r["spray"] for r in rs) / len(rs)
            model = sum(r["model"] for r in rs) / len(rs)
            print("%-24s %-9s %5d %8.3f %8.3f %9.1f%% %8.3f %8.3f %9s" % (
                op, mode, rs[0]["lanes"], best, xm, 100 * dev, best / spray, model / spray,
                ("%.2fx" % (plain_best / best)) if plain_best else "-"))
            if args.smoke and pinned_mode(mode) and xm > 1.5:
                # Timing is reported, not failed on: under a loaded machine's CPU (load 23 on 2
                # cores) pinned ran 2.1x the model; wrong results and off-plane paths still fail.
                print("  note: pinned is %.2fx the model's time (the machine's load?)" % xm)
        ecmp = sum(r["ecmp"] for r in results[(op, modes[0])]) / len(results[(op, modes[0])])
        spray = sum(r["spray"] for r in results[(op, modes[0])]) / len(results[(op, modes[0])])
        print("%-24s model: random ECMP expected %.3f s = %.2fx spraying" % (op, ecmp, ecmp / spray))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
