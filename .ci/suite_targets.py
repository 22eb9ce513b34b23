#!/usr/bin/env python3
"""The tests of some suites in a configured build, and the targets they need (.ci/run, .ci/wheels, .ci/sanitize).

    suite_targets.py BUILD [--suites interpose,mpi] [--skip NAME,...] [--also NAME,...] [--fuzz]
                     [--all-but-tests] [--tests FILE] --targets FILE

A test is selected when one of its suites is named, it is not in the emulated cluster's suite
(those launch Debian's mpirun inside network namespaces) and its name is not skipped, or when
--also names it. Targets are the selected tests' executables, the programs they are handed and
what they depend on (with --fuzz, also the libFuzzer targets; with --all-but-tests, every target
outside tests/), relative to BUILD, so that `ninja -C BUILD $(cat FILE)` builds them and nothing
else.
"""
import argparse
import json
import os
import subprocess


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("build")
    ap.add_argument("--suites", default="")
    ap.add_argument("--also", default="", help="tests selected by name, whatever their suites")
    ap.add_argument("--skip", default="")
    ap.add_argument("--fuzz", action="store_true")
    ap.add_argument("--all-but-tests", action="store_true",
                    help="also every target outside tests/ (libraries, tools, benchmarks, examples)")
    ap.add_argument("--tests")
    ap.add_argument("--targets", required=True)
    a = ap.parse_args()
    suites = set(filter(None, a.suites.split(",")))
    skip = set(filter(None, a.skip.split(",")))
    also = set(filter(None, a.also.split(",")))

    def introspect(what):
        return json.loads(subprocess.run(["meson", "introspect", a.build, what], check=True,
                                         stdout=subprocess.PIPE, text=True).stdout)

    files = {t["id"]: t["filename"] for t in introspect("--targets")}
    by_path = {os.path.realpath(f): f for fs in files.values() for f in fs}
    names, want = [], set()
    for t in introspect("--tests"):
        mine = {s.split(":")[-1] for s in t["suite"]}  # introspection names them "project:suite"
        if t["name"] not in also and (not suites & mine or "cluster" in mine or t["name"] in skip):
            continue
        names.append(t["name"])
        for i in t.get("depends", []):
            want.update(files.get(i, []))
        for arg in t["cmd"]:  # the test's own executable, and programs it is handed
            if os.path.realpath(arg) in by_path:
                want.add(by_path[os.path.realpath(arg)])
    if a.fuzz:
        want.update(f for fs in files.values() for f in fs
                    if os.path.basename(f).startswith("fuzz-") and "replay" not in f)
    if a.all_but_tests:
        tests_dir = os.path.join(os.path.realpath(a.build), "tests") + os.sep
        want.update(f for fs in files.values() for f in fs if not os.path.realpath(f).startswith(tests_dir))
    if a.tests:
        with open(a.tests, "w") as f:
            f.writelines(n + "\n" for n in names)
    with open(a.targets, "w") as f:
        f.writelines(os.path.relpath(p, a.build) + "\n" for p in sorted(want))


if __name__ == "__main__":
    main()
