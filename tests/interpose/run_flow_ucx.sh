#!/bin/sh
# tests/interpose/run_flow_ucx.sh: under MPICH (UCX), SHUNT_FLOW=pinned and auto set none of UCX's variables (its TCP connections are not bound to the plane interfaces), with a warning and an info line.
# Usage: run_flow_ucx.sh MPIEXEC LIBSHUNT PROGRAM (PROGRAM: flow_env). Runs 2 ranks in a network
# namespace of its own whose plane interfaces pl1 and pl2 are a veth pair, on a fabric that lists
# this host. Exit status 77 (skip) without root or network namespaces.
set -u
mpiexec=$1 lib=$2 prog=$3
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null 2>&1 || ! command -v ip >/dev/null 2>&1 ||
    ! unshare -n true 2>/dev/null; then
    echo "run_flow_ucx.sh: skipped (needs root, unshare and ip for a network namespace)"
    exit 77
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
host=$(hostname)
fail=0
for mode in pinned auto; do
    unshare -n sh -c '
        ip link set lo up && ip link add pl1 type veth peer name pl2 && ip link set pl1 up &&
            ip link set pl2 up || exit 77
        exec "$@"' run_flow_ucx "$mpiexec" -n 2 -genv LD_PRELOAD "$lib" -genv SHUNT_FLOW "$mode" \
        -genv SHUNT_FABRIC "spines=2;leaves={$host|other};planes=pl" -genv SHUNT_LOG info "$prog" \
        >"$out/$mode.out" 2>"$out/$mode.err"
    rc=$?
    if [ $rc -eq 77 ]; then
        echo "run_flow_ucx.sh: skipped (no veth interfaces in a network namespace here)"; exit 77
    elif [ $rc -ne 0 ]; then
        echo "FAIL: SHUNT_FLOW=$mode: exit $rc"; cat "$out/$mode.err"; fail=1; continue
    fi
    for v in UCX_NET_DEVICES UCX_MAX_RNDV_LANES UCX_IB_NUM_PATHS; do
        grep -qx "$v=(unset)" "$out/$mode.out" || { echo "FAIL: SHUNT_FLOW=$mode set $v:"; cat "$out/$mode.out"; fail=1; }
    done
    want="warning: config: flow splitting is off: pinned lanes are not available under UCX"
    [ "$mode" = auto ] && want="decide: flow: pinned lanes are not available under UCX"
    n=$(grep -c "$want" "$out/$mode.err")
    if [ "$n" -ne 1 ]; then
        echo "FAIL: SHUNT_FLOW=$mode: '$want' said $n times (once wanted):"; cat "$out/$mode.err"; fail=1
    fi
done
[ $fail -eq 0 ] && echo "run_flow_ucx.sh: pinned and auto set nothing under UCX, said once each"
exit $fail
