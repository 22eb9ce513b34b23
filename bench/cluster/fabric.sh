#!/bin/bash
# bench/cluster/fabric.sh: an emulated leaf-spine fabric on one machine (namespaces for hosts, leaf and spine routers; rate-limited veth links; ECMP with layer-4 hashing and per-spine address planes) that runs one command beside it.
set -euo pipefail

readonly SHUNT_FABRIC_REFUSED=77  # cannot be built here (like a skipped test)

usage() {
    cat <<'EOF'
Usage: fabric.sh [options] [--] COMMAND [ARGS...]

Builds an emulated two-tier leaf-spine fabric of network namespaces, runs COMMAND (in the
caller's namespace, as root, with FABRIC_DIR set), and tears the fabric down again, also after a
failure or an interrupt. Needs root and iproute2 (ip, tc).

  Layout: L leaf routers and S spine routers (namespaces with forwarding on), H hosts under each
  leaf; one veth link from each host to its leaf and from each leaf to each spine, every link
  limited to RATE in each direction (tc tbf on both ends). Addresses only in 198.18.0.0/15:
    host i of leaf l, plane p:  198.18.(16 l + p).(i + 1)/32 on its eth0, for p = 0 .. S
    links:                     198.19.l.(4 i + 1..2)/30 (host), 198.19.(64 + s).(4 l + 1..2)/30 (spine)
  Plane 0 is routed by equal-cost multipath over every spine, hashed on the 5-tuple
  (net.ipv4.fib_multipath_hash_policy=1 in the leaves); plane p >= 1 only through spine p - 1, so
  choosing a destination (and source) address chooses the spine: the pinned mode. Traffic goes
  only to these addresses and to loopback. Hosts: no slow start after idle, and TCP small queues
  of about 10 ms of RATE (net.ipv4.tcp_limit_output_bytes).

  --plane-interfaces puts each plane p >= 1 of a host on its own interface pl<p> (a macvlan on
  eth0: the same NIC link, shaped once) and leaves eth0 only its plane-0 address, so that
  libraries which choose paths by interface (Open MPI's TCP component: one module per
  interface) see one interface per spine; the host's /30 link address then stays on the leaf
  side only (the host reaches its leaf on-link). fabric-mpirun launches Open MPI across the
  hosts (see its --help).

  $FABRIC_DIR/fabric.txt describes it for COMMAND, one item a line:
    leaves L / hosts_per_leaf H / spines S / rate_bit_per_s R
    host <leaf> <index> <namespace>   (every host)
    leaf <leaf> <namespace>           (every leaf)
    spine <spine> <namespace>         (every spine)
    planes interfaces|addresses       (where planes 1..S live)
  bench/cluster/fabric_check (the flows of a collective phase under ECMP, split, pinned; against
  the flow model) reads it:
      fabric.sh --leaves 4 --hosts-per-leaf 2 --spines 2 -- build/bench/fabric_check

Options:
  --leaves L           leaf routers (default 4, at most 15)
  --hosts-per-leaf H   hosts under each leaf (default 2, at most 32)
  --spines S           spine routers (default 2, at most 15)
  --rate RATE          tc rate of every link and direction (default 100mbit)
  --plane-interfaces   planes 1..S on interfaces pl1..plS instead of addresses on eth0
  --ack-priority       every link an HTB at the rate whose packets under 128 bytes (pure ACKs)
                       go ahead of the data, instead of one tbf queue: a connection carrying
                       data both ways (MPI's pairwise exchanges) otherwise waits for its ACKs
                       behind up to 50 ms of data
  --timeout SECONDS    limit for COMMAND (default 600)
  --verbose            print each setup step
  -h, --help           this text

Exit status: COMMAND's; 77 when the fabric cannot be built here (not root, missing tools, no
network namespaces); 2 for a usage error; 3 when the setup fails midway; 124 when COMMAND ran
past --timeout.
EOF
}

leaves=4 per_leaf=2 spines=2 rate=100mbit limit=600 verbose=0 plane_ifs=0 ack_priority=0
die_usage() { echo "fabric.sh: $*" >&2; echo "Try 'fabric.sh --help'." >&2; exit 2; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        --leaves) leaves="${2-}"; shift 2 || die_usage "--leaves needs a value" ;;
        --hosts-per-leaf) per_leaf="${2-}"; shift 2 || die_usage "--hosts-per-leaf needs a value" ;;
        --spines) spines="${2-}"; shift 2 || die_usage "--spines needs a value" ;;
        --rate) rate="${2-}"; shift 2 || die_usage "--rate needs a value" ;;
        --timeout) limit="${2-}"; shift 2 || die_usage "--timeout needs a value" ;;
        --plane-interfaces) plane_ifs=1; shift ;;
        --ack-priority) ack_priority=1; shift ;;
        --verbose) verbose=1; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; break ;;
        -*) die_usage "unknown option '$1'" ;;
        *) break ;;
    esac
done
[[ $# -gt 0 ]] || die_usage "no command to run"
[[ "$leaves" =~ ^[0-9]+$ && "$leaves" -ge 2 && "$leaves" -le 15 ]] || die_usage "--leaves must be 2..15, not '$leaves'"
[[ "$per_leaf" =~ ^[0-9]+$ && "$per_leaf" -ge 1 && "$per_leaf" -le 32 ]] || die_usage "--hosts-per-leaf must be 1..32, not '$per_leaf'"
[[ "$spines" =~ ^[0-9]+$ && "$spines" -ge 1 && "$spines" -le 15 ]] || die_usage "--spines must be 1..15, not '$spines'"
[[ "$rate" =~ ^([0-9]+)([km]?)bit$ ]] || die_usage "--rate must look like 100mbit or 500kbit, not '$rate'"
case "${BASH_REMATCH[2]}" in
    k) rate_bps=$((BASH_REMATCH[1] * 1000)) ;;
    m) rate_bps=$((BASH_REMATCH[1] * 1000000)) ;;
    *) rate_bps=${BASH_REMATCH[1]} ;;
esac
[[ "$rate_bps" -ge 1000000 && "$rate_bps" -le 10000000000 ]] || die_usage "--rate must be 1mbit..10000mbit"
[[ "$limit" =~ ^[0-9]+$ && "$limit" -ge 1 ]] || die_usage "--timeout must be a positive number of seconds, not '$limit'"

refuse() { echo "fabric.sh: cannot build the emulated fabric here: $*" >&2; exit "$SHUNT_FABRIC_REFUSED"; }
[[ "$(id -u)" -eq 0 ]] || refuse "network namespaces need root (run as root or skip)"
for tool in ip tc timeout; do
    command -v "$tool" >/dev/null 2>&1 || refuse "'$tool' is not installed"
done
log() { if [[ $verbose -eq 1 ]]; then echo "fabric.sh: $*" >&2; fi; }

# Names are private to this run: namespaces carry the process id, links live inside them.
readonly tag="shf$$"
workdir=""
namespaces=()
cmd_pid=""

teardown() {
    local rc=$?
    trap - EXIT INT TERM HUP
    set +e
    local ns pid
    # COMMAND (through timeout, which passes the signal on), then anything left in the fabric.
    [[ -n "$cmd_pid" ]] && kill -TERM "$cmd_pid" 2>/dev/null && wait "$cmd_pid" 2>/dev/null
    for ns in "${namespaces[@]}"; do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -TERM "$pid" 2>/dev/null; done
    done
    for ns in "${namespaces[@]}"; do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null; done
        ip netns del "$ns" 2>/dev/null
    done
    [[ -n "$workdir" ]] && rm -rf "$workdir"
    log "torn down"
    exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

setup_failed() { echo "fabric.sh: setup failed: $*" >&2; exit 3; }
# A namespace with loopback up, no reverse-path filter (multipath replies may come back over
# another spine) and, for routers, forwarding.
add_ns() {
    local ns=$1 router=$2
    ip netns add "$ns" 2>/dev/null || return 1
    namespaces+=("$ns")
    ip -n "$ns" link set lo up
    ip netns exec "$ns" sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0 >/dev/null ||
        setup_failed "sysctl in $ns"
    if [[ $router -eq 1 ]]; then
        ip netns exec "$ns" sysctl -qw net.ipv4.ip_forward=1 >/dev/null || setup_failed "forwarding in $ns"
    fi
}
shape() {
    if [[ $ack_priority -eq 0 ]]; then
        ip netns exec "$1" tc qdisc add dev "$2" root tbf rate "$rate" burst 64kb latency 50ms ||
            setup_failed "tc tbf on $2 in $1"
        return
    fi
    # The same rate, with packets under 128 bytes (pure ACKs, and MPI's short control messages)
    # ahead of the data: a class of their own with HTB priority, the data's queue 50 ms deep as
    # tbf's.
    local q=(ip netns exec "$1" tc) small=$((rate_bps / 20)) big=$((rate_bps - rate_bps / 20))
    "${q[@]}" qdisc add dev "$2" root handle 1: htb default 20 &&
        "${q[@]}" class add dev "$2" parent 1: classid 1:1 htb rate "$rate_bps"bit ceil "$rate_bps"bit \
            burst 64kb cburst 64kb quantum 1514 &&
        "${q[@]}" class add dev "$2" parent 1:1 classid 1:10 htb rate "$small"bit ceil "$rate_bps"bit prio 0 \
            burst 64kb cburst 64kb quantum 1514 &&
        "${q[@]}" class add dev "$2" parent 1:1 classid 1:20 htb rate "$big"bit ceil "$rate_bps"bit prio 1 \
            burst 64kb cburst 64kb quantum 1514 &&
        "${q[@]}" qdisc add dev "$2" parent 1:10 pfifo limit 1000 &&
        "${q[@]}" qdisc add dev "$2" parent 1:20 bfifo limit $((rate_bps / 8 / 20)) &&
        "${q[@]}" filter add dev "$2" parent 1: protocol ip prio 1 u32 match u16 0 0xff80 at 2 flowid 1:10 ||
        setup_failed "tc htb with ACK priority on $2 in $1"
}
host_ns() { echo "$tag-h$1-$2"; }
leaf_ns() { echo "$tag-l$1"; }
spine_ns() { echo "$tag-s$1"; }
addr() { echo "198.18.$((16 * $1 + $3)).$(($2 + 1))"; }  # leaf, index, plane

workdir="$(mktemp -d "${TMPDIR:-/tmp}/shunt-fabric.XXXXXX")"
desc="$workdir/fabric.txt"
printf 'leaves %d\nhosts_per_leaf %d\nspines %d\nrate_bit_per_s %d\nplanes %s\n' "$leaves" "$per_leaf" "$spines" \
    "$rate_bps" "$([[ $plane_ifs -eq 1 ]] && echo interfaces || echo addresses)" > "$desc"
add_ns "$(spine_ns 0)" 1 || refuse "'ip netns add' failed (no network namespace support?)"
for ((s = 1; s < spines; ++s)); do add_ns "$(spine_ns "$s")" 1 || setup_failed "namespace $(spine_ns "$s")"; done
for ((s = 0; s < spines; ++s)); do echo "spine $s $(spine_ns "$s")" >> "$desc"; done
for ((l = 0; l < leaves; ++l)); do
    L="$(leaf_ns "$l")"
    add_ns "$L" 1 || setup_failed "namespace $L"
    ip netns exec "$L" sysctl -qw net.ipv4.fib_multipath_hash_policy=1 >/dev/null ||
        refuse "the kernel has no layer-4 multipath hashing (net.ipv4.fib_multipath_hash_policy)"
    echo "leaf $l $L" >> "$desc"
    # Leaf-spine links.
    for ((s = 0; s < spines; ++s)); do
        S="$(spine_ns "$s")"
        ip link add "s$s" netns "$L" type veth peer name "l$l" netns "$S" || setup_failed "veth leaf $l - spine $s"
        ip -n "$L" addr add "198.19.$((64 + s)).$((4 * l + 2))/30" dev "s$s"
        ip -n "$S" addr add "198.19.$((64 + s)).$((4 * l + 1))/30" dev "l$l"
        ip -n "$L" link set "s$s" up
        ip -n "$S" link set "l$l" up
        shape "$L" "s$s"
        shape "$S" "l$l"
        # The spine reaches every plane of the leaf's hosts through it.
        ip -n "$S" route add "198.18.$((16 * l)).0/20" via "198.19.$((64 + s)).$((4 * l + 2))" dev "l$l" ||
            setup_failed "route on spine $s"
    done
    # Hosts.
    for ((i = 0; i < per_leaf; ++i)); do
        H="$(host_ns "$l" "$i")"
        add_ns "$H" 0 || setup_failed "namespace $H"
        # A connection keeps its flow hash, hence its spine, after a retransmission timeout
        # (kernels from 5.19; older ones keep it anyway unless the path fails).
        ip netns exec "$H" sysctl -qw net.core.txrehash=0 >/dev/null 2>&1 || true
        # A connection idle between collective steps keeps its window (as datacenter hosts are
        # set): otherwise every step of an MPI collective starts each connection in slow start.
        ip netns exec "$H" sysctl -qw net.ipv4.tcp_slow_start_after_idle=0 >/dev/null 2>&1 || true
        # TCP small queues scaled to the emulated rate: a connection keeps at most about 10 ms of
        # the link queued on its own host. The kernel's default (4 MiB here) is more than a second
        # at 25 Mbit/s, and the ACKs that ride on a connection's data in the other direction
        # (every pairwise exchange) waited behind it.
        ip netns exec "$H" sysctl -qw net.ipv4.tcp_limit_output_bytes=$((rate_bps / 800 > 16384 ? rate_bps / 800 : 16384)) \
            >/dev/null 2>&1 || true
        ip link add "h$i" netns "$L" type veth peer name eth0 netns "$H" || setup_failed "veth host $l.$i"
        ip -n "$L" addr add "198.19.$l.$((4 * i + 1))/30" dev "h$i"
        ip -n "$L" link set "h$i" up
        ip -n "$H" link set eth0 up
        if [[ $plane_ifs -eq 0 ]]; then
            ip -n "$H" addr add "198.19.$l.$((4 * i + 2))/30" dev eth0
            for ((p = 0; p <= spines; ++p)); do
                ip -n "$H" addr add "$(addr "$l" "$i" "$p")/32" dev eth0
                ip -n "$L" route add "$(addr "$l" "$i" "$p")/32" via "198.19.$l.$((4 * i + 2))" dev "h$i" ||
                    setup_failed "host route on leaf $l"
            done
            ip -n "$H" route add 198.18.0.0/16 via "198.19.$l.$((4 * i + 1))" dev eth0 src "$(addr "$l" "$i" 0)" ||
                setup_failed "route on host $l.$i"
        else
            # eth0 holds the plane-0 address alone (a library that takes an interface's first
            # address gets it); each further plane is a macvlan of eth0, so all share the NIC's
            # shaped link. Only the owner of an address answers ARP for it.
            ip netns exec "$H" sysctl -qw net.ipv4.conf.all.arp_ignore=1 >/dev/null || setup_failed "arp_ignore in $H"
            ip -n "$H" addr add "$(addr "$l" "$i" 0)/32" dev eth0
            for ((p = 1; p <= spines; ++p)); do
                ip -n "$H" link add link eth0 name "pl$p" type macvlan mode bridge ||
                    setup_failed "macvlan pl$p on host $l.$i (no macvlan support?)"
                ip netns exec "$H" sysctl -qw "net.ipv4.conf.pl$p.rp_filter=0" >/dev/null
                ip -n "$H" addr add "$(addr "$l" "$i" "$p")/32" dev "pl$p"
                ip -n "$H" link set "pl$p" up
            done
            for ((p = 0; p <= spines; ++p)); do
                ip -n "$L" route add "$(addr "$l" "$i" "$p")/32" dev "h$i" src "198.19.$l.$((4 * i + 1))" ||
                    setup_failed "host route on leaf $l"
            done
            ip -n "$H" route add 198.18.0.0/16 via "198.19.$l.$((4 * i + 1))" dev eth0 onlink src "$(addr "$l" "$i" 0)" ||
                setup_failed "route on host $l.$i"
        fi
        shape "$H" eth0
        shape "$L" "h$i"
        echo "host $l $i $H" >> "$desc"
    done
done
# Routes between leaves: plane 0 over every spine (ECMP), plane p over spine p - 1 only.
for ((l = 0; l < leaves; ++l)); do
    L="$(leaf_ns "$l")"
    for ((m = 0; m < leaves; ++m)); do
        [[ $m -eq $l ]] && continue
        hops=()
        for ((s = 0; s < spines; ++s)); do hops+=(nexthop via "198.19.$((64 + s)).$((4 * l + 1))" dev "s$s" weight 1); done
        if [[ $spines -eq 1 ]]; then
            ip -n "$L" route add "198.18.$((16 * m)).0/24" via "198.19.64.$((4 * l + 1))" dev s0 || setup_failed "route on leaf $l"
        else
            ip -n "$L" route add "198.18.$((16 * m)).0/24" "${hops[@]}" || setup_failed "multipath route on leaf $l"
        fi
        for ((s = 0; s < spines; ++s)); do
            ip -n "$L" route add "198.18.$((16 * m + s + 1)).0/24" via "198.19.$((64 + s)).$((4 * l + 1))" dev "s$s" ||
                setup_failed "plane route on leaf $l"
        done
    done
done
log "$leaves leaves x $per_leaf hosts, $spines spines, $rate links; description in $desc"

log "running: $*"
# In the background with `wait`, so that a signal to this script is handled at once and the
# teardown runs.
FABRIC_DIR="$workdir" timeout --kill-after=10 "$limit" "$@" <&0 &
cmd_pid=$!
set +e
wait "$cmd_pid"
rc=$?
cmd_pid=""
set -e
exit "$rc"
