#!/bin/bash
# bench/cluster/cluster.sh: an emulated multi-node cluster on one machine (network namespaces, veth, bridge, tc) that runs one command with Open MPI across it.
set -euo pipefail

readonly SHUNT_CLUSTER_REFUSED=77  # cannot be built here (like a skipped test)
readonly here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"

usage() {
    cat <<'EOF'
Usage: cluster.sh [options] [--] COMMAND [ARGS...]

Builds an emulated cluster of network namespaces on this machine, runs COMMAND in it, and tears
it down again (also after a failure or an interrupt). Needs root, iproute2 (ip, tc), unshare and
Open MPI (mpirun.openmpi).

  Layout: one namespace per node (node0, node1, ...: address 198.18.0.<i+1>/24 on eth0, its own
  host name), a switch namespace with a bridge, one veth link per node into the bridge, and a
  head namespace (198.18.0.254, host name "head") where COMMAND runs. Every node link is
  limited in both directions to the rate (tc tbf) and, where the kernel has sch_netem, delayed.
  Traffic stays on 198.18.0.0/24 and loopback.

  COMMAND runs in the head namespace with `mpirun` first in PATH: Open MPI's launcher set up for
  the cluster (hostfile with --ranks-per-node slots per node, the rsh agent bench/cluster/
  rsh-agent that starts orted inside each node's namespaces, TCP between nodes and shared
  memory within: --mca pml ob1 --mca btl tcp,vader,self --mca btl_tcp_if_include eth0
  --mca oob_tcp_if_include eth0 --mca plm_rsh_no_tree_spawn 1 --mca btl_tcp_links N). The
  nodes share this machine's cores, so ranks yield the CPU while they wait (--mca
  mpi_yield_when_idle 1, or OMPI_MCA_mpi_yield_when_idle's value, unless the command names that
  parameter itself): busy-polling
  ranks on shared cores make messages wait for scheduler ticks of about 4 ms. Example:
      cluster.sh --nodes 2 -- mpirun -n 4 ./test_collectives
      cluster.sh -- mpirun -n 2 --map-by node ./cluster_link_check --expect-gbit 1
  Environment for COMMAND: CLUSTER_NODES, CLUSTER_RANKS_PER_NODE,
  CLUSTER_HOSTFILE, CLUSTER_DIR, CLUSTER_RATE, CLUSTER_DELAY
  (empty when the delay could not be emulated); the ranks get CLUSTER_RATE too (mpirun -x).

Options:
  --nodes N            number of nodes (default 2, at most 200)
  --ranks-per-node N   MPI slots per node (default 2)
  --rate RATE          tc rate of each node link and direction (default 1gbit)
  --delay TIME         one-way delay added on each node link (default 50us; 0 for none)
  --require-delay      refuse (exit 77) when the kernel cannot add a delay (no sch_netem)
                       instead of going on without one
  --tcp-links N        Open MPI TCP connections per pair of processes (default 2: with one,
                       Open MPI 4.1.4 carries both directions of an exchange on one socket and
                       reaches about half the link rate per direction, so the library and not
                       the link would be the bottleneck)
  --timeout SECONDS    limit for COMMAND (default 900)
  --verbose            print each setup step
  -h, --help           this text

Exit status: COMMAND's; 77 when the cluster cannot be built here (not root, missing tools, no
network namespaces, no Open MPI); 2 for a usage error; 3 when the setup fails midway; 124 when
COMMAND ran past --timeout.
EOF
}

nodes=2 slots=2 rate=1gbit delay=50us require_delay=0 limit=900 verbose=0 links=2
die_usage() { echo "cluster.sh: $*" >&2; echo "Try 'cluster.sh --help'." >&2; exit 2; }
while [[ $# -gt 0 ]]; do
    case "$1" in
        --nodes) nodes="${2-}"; shift 2 || die_usage "--nodes needs a value" ;;
        --ranks-per-node) slots="${2-}"; shift 2 || die_usage "--ranks-per-node needs a value" ;;
        --rate) rate="${2-}"; shift 2 || die_usage "--rate needs a value" ;;
        --delay) delay="${2-}"; shift 2 || die_usage "--delay needs a value" ;;
        --require-delay) require_delay=1; shift ;;
        --timeout) limit="${2-}"; shift 2 || die_usage "--timeout needs a value" ;;
        --tcp-links) links="${2-}"; shift 2 || die_usage "--tcp-links needs a value" ;;
        --verbose) verbose=1; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; break ;;
        -*) die_usage "unknown option '$1'" ;;
        *) break ;;
    esac
done
[[ $# -gt 0 ]] || die_usage "no command to run"
[[ "$nodes" =~ ^[0-9]+$ && "$nodes" -ge 1 && "$nodes" -le 200 ]] || die_usage "--nodes must be 1..200, not '$nodes'"
[[ "$slots" =~ ^[0-9]+$ && "$slots" -ge 1 && "$slots" -le 1024 ]] || die_usage "--ranks-per-node must be 1..1024, not '$slots'"
[[ "$rate" =~ ^[0-9]+(\.[0-9]+)?([kmgt]?bit|[kmgt]?bps)$ ]] || die_usage "--rate must look like 1gbit or 500mbit, not '$rate'"
[[ "$delay" =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)?$ ]] || die_usage "--delay must look like 50us or 1ms, not '$delay'"
[[ "$limit" =~ ^[0-9]+$ && "$limit" -ge 1 ]] || die_usage "--timeout must be a positive number of seconds, not '$limit'"
[[ "$links" =~ ^[0-9]+$ && "$links" -ge 1 && "$links" -le 16 ]] || die_usage "--tcp-links must be 1..16, not '$links'"

refuse() { echo "cluster.sh: cannot build the emulated cluster here: $*" >&2; exit "$SHUNT_CLUSTER_REFUSED"; }
[[ "$(id -u)" -eq 0 ]] || refuse "network namespaces need root (run as root or skip)"
for tool in ip tc unshare mpirun.openmpi; do
    command -v "$tool" >/dev/null 2>&1 || refuse "'$tool' is not installed"
done
log() { if [[ $verbose -eq 1 ]]; then echo "cluster.sh: $*" >&2; fi; }

# Names are private to this run: namespaces carry the process id, links live inside them.
readonly tag="shc$$"
readonly sw="$tag-sw" head="$tag-head"
node_ns() { echo "$tag-n$1"; }
workdir=""
namespaces=()

teardown() {
    local rc=$?
    trap - EXIT INT TERM HUP
    set +e
    local ns pid
    for ns in "${namespaces[@]}"; do
        for pid in $(ip netns pids "$ns" 2>/dev/null); do kill -TERM "$pid" 2>/dev/null; done
    done
    # Give MPI daemons a moment to leave, then make sure.
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        local left=0
        for ns in "${namespaces[@]}"; do [[ -n "$(ip netns pids "$ns" 2>/dev/null)" ]] && left=1; done
        [[ $left -eq 0 ]] && break
        sleep 0.2
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

setup_failed() { echo "cluster.sh: setup failed: $*" >&2; exit 3; }
add_ns() {
    ip netns add "$1" 2>/dev/null || return 1
    namespaces+=("$1")
    ip -n "$1" link set lo up
}

# Shape one direction of a link: delay (netem, when present) and rate (tbf).
have_netem=-1
shape() {
    local ns=$1 dev=$2
    if [[ "$delay" != 0 && "$delay" != 0us && "$delay" != 0ms ]]; then
        if [[ $have_netem -ne 0 ]] && ip netns exec "$ns" tc qdisc add dev "$dev" root handle 1: netem delay "$delay" limit 100000 2>/dev/null; then
            have_netem=1
            ip netns exec "$ns" tc qdisc add dev "$dev" parent 1:1 handle 10: tbf rate "$rate" burst 256kb latency 100ms ||
                setup_failed "tc tbf under netem on $dev in $ns"
            return
        fi
        have_netem=0
    fi
    ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst 256kb latency 100ms ||
        setup_failed "tc tbf on $dev in $ns"
}

workdir="$(mktemp -d "${TMPDIR:-/tmp}/shunt-cluster.XXXXXX")"
add_ns "$sw" || refuse "'ip netns add' failed (no network namespace support?)"
add_ns "$head" || setup_failed "namespace $head"
ip -n "$sw" link add br0 type bridge || setup_failed "bridge"
ip -n "$sw" link set br0 up
# Head link: control traffic only (mpirun and the daemons), not shaped.
ip link add h0 netns "$sw" type veth peer name eth0 netns "$head" || setup_failed "veth for the head"
ip -n "$sw" link set h0 master br0 up
ip -n "$head" addr add 198.18.0.254/24 dev eth0
ip -n "$head" link set eth0 up
: > "$workdir/hostfile"
: > "$workdir/hosts"
for ((i = 0; i < nodes; ++i)); do
    ns="$(node_ns "$i")"
    add_ns "$ns" || setup_failed "namespace $ns"
    ip link add "p$i" netns "$sw" type veth peer name eth0 netns "$ns" || setup_failed "veth for node$i"
    ip -n "$sw" link set "p$i" master br0 up
    ip -n "$ns" addr add "198.18.0.$((i + 1))/24" dev eth0
    ip -n "$ns" link set eth0 up
    shape "$ns" eth0   # node -> switch
    shape "$sw" "p$i"  # switch -> node
    echo "node$i slots=$slots" >> "$workdir/hostfile"
    echo "node$i $ns" >> "$workdir/hosts"
    log "node$i: namespace $ns, 198.18.0.$((i + 1)), $rate$([[ $have_netem -eq 1 ]] && echo ", delay $delay")"
done
effective_delay="$delay"
if [[ $have_netem -eq 0 ]]; then
    [[ $require_delay -eq 1 ]] && refuse "the kernel has no sch_netem, so no link delay can be added (--require-delay)"
    echo "cluster.sh: note: no sch_netem in this kernel; links are rate-limited but not delayed" >&2
    effective_delay=""
fi
[[ "$delay" == 0 || "$delay" == 0us || "$delay" == 0ms ]] && effective_delay=""

# The launcher for COMMAND.
mkdir -p "$workdir/bin"
cat > "$workdir/bin/mpirun" <<EOF
#!/bin/sh
# mpirun of the emulated cluster: Open MPI across the node namespaces; ranks that share cores yield
# (unless the command line names mpi_yield_when_idle itself).
case " \$* " in
    *mpi_yield_when_idle*) set -- "\$@" ;;
    *) set -- --mca mpi_yield_when_idle "\${OMPI_MCA_mpi_yield_when_idle:-1}" "\$@" ;;
esac
exec mpirun.openmpi --hostfile "$workdir/hostfile" \\
    --mca plm_rsh_agent "$here/rsh-agent" --mca plm_rsh_no_tree_spawn 1 \\
    --mca oob_tcp_if_include eth0 --mca pml ob1 --mca btl tcp,vader,self --mca btl_tcp_if_include eth0 \\
    --mca btl_tcp_links $links -x CLUSTER_RATE="$rate" \\
    "\$@"
EOF
chmod +x "$workdir/bin/mpirun"

log "running: $*"
# In the background with `wait`, so that a signal to this script is handled at once (bash runs
# traps only between foreground commands) and the teardown stops everything in the cluster.
ip netns exec "$head" env PATH="$workdir/bin:$PATH" \
    CLUSTER_DIR="$workdir" CLUSTER_NODES="$nodes" CLUSTER_RANKS_PER_NODE="$slots" \
    CLUSTER_HOSTFILE="$workdir/hostfile" CLUSTER_RATE="$rate" CLUSTER_DELAY="$effective_delay" \
    OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 \
    timeout --kill-after=10 "$limit" unshare --uts /bin/sh -c 'hostname head && exec "$@"' cluster-head "$@" <&0 &
set +e
wait "$!"
rc=$?
set -e
exit "$rc"
