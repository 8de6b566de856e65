#!/bin/bash
# Emulate N hosts on one machine: network namespaces joined by rate-limited links to a bridge.
#
#   benchmarks/netns_hosts.sh up N RATE   # e.g. up 4 2gbit: hosts hpcdl-h1..hN at 10.213.0.1..N
#   benchmarks/netns_hosts.sh down        # remove every namespace, link and qdisc made here
#   benchmarks/netns_hosts.sh agent HOST CMD...   # Open MPI's rsh agent: run CMD in HOST's namespace
#   benchmarks/netns_hosts.sh env         # print the Open MPI settings that use these hosts
#
# Each host is a namespace with one end of a veth pair (10.213.0.i/24); the other end joins the
# bridge hpcdl-br0 (10.213.0.254, where mpirun's daemon listens). Each direction of each link is
# shaped by a token bucket at RATE (tbf on both veth ends): a full-duplex link per node, so the
# link and not the CPU bounds a large exchange. The subnet exists only inside these namespaces and
# the bridge; no route leads anywhere else. Needs root (ip netns, tc).
#
# mpirun -H 10.213.0.1,...: the agent maps an address to its namespace and runs the daemon there
# under its own UTS namespace with hostname hpcdl-hI, so every rank sees a host of its own.
set -euo pipefail

PREFIX=hpcdl-h
BRIDGE=hpcdl-br0
NET=10.213.0
ROOT_IP=$NET.254

_down() {
    local ns
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PREFIX[0-9]*$" || true); do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
    # deleting a namespace deletes its veth end and so the pair; remove leftovers of a half run
    local dev
    for dev in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 \
                 | grep "^${PREFIX}[0-9]*-br$" || true); do
        ip link del "$dev" 2>/dev/null || true
    done
    if ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link del "$BRIDGE"
    fi
}

_shape() {  # _shape [netns] DEV RATE: a token bucket on DEV's egress, burst enough for GSO
    local dev=$1 rate=$2
    shift 2
    "$@" tc qdisc replace dev "$dev" root tbf rate "$rate" burst 256kb latency 20ms
}

_congctl() {  # _congctl NS ADDR: the subnet's route in NS uses cubic (per route: a namespace may
    # not set a restricted default of its own, and the machine's setting stays as it is)
    local ns=$1 addr=$2
    if grep -qw cubic /proc/sys/net/ipv4/tcp_available_congestion_control; then
        ip -n "$ns" route replace "$NET.0/24" dev eth0 proto kernel scope link src "$addr" \
            congctl cubic
    else
        echo "up: cubic is not available here; $ns keeps the default congestion control" >&2
    fi
}

_up() {
    local n=$1 rate=$2 i ns
    [[ $n =~ ^[0-9]+$ && $n -ge 1 && $n -le 16 ]] || { echo "up: N must be 1..16" >&2; exit 2; }
    _down
    ip link add "$BRIDGE" type bridge
    ip addr add "$ROOT_IP/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    for i in $(seq 1 "$n"); do
        ns=$PREFIX$i
        ip netns add "$ns"
        ip link add "$ns-br" type veth peer name "$ns-eth"
        ip link set "$ns-eth" netns "$ns"
        ip link set "$ns-br" master "$BRIDGE" up
        ip -n "$ns" link set lo up
        ip -n "$ns" link set "$ns-eth" name eth0
        ip -n "$ns" addr add "$NET.$i/24" dev eth0
        ip -n "$ns" link set eth0 up
        # the barrier between timed iterations idles each connection: keep its window
        ip netns exec "$ns" sysctl -q net.ipv4.tcp_slow_start_after_idle=0
        # data and acknowledgements share one connection per pair of ranks and one queue per
        # direction: windows large enough to keep a link busy through the queue's delay
        ip netns exec "$ns" sysctl -q net.ipv4.tcp_rmem="4096 131072 33554432" \
            net.ipv4.tcp_wmem="4096 65536 33554432"
        # a loss-based congestion control on the subnet's route, whatever the machine's default:
        # under BBR a ring's pair of connections, each carrying data one way and the other's
        # acknowledgements behind the queue, kept falling to two thirds of the link for minutes
        _congctl "$ns" "$NET.$i"
        _shape eth0 "$rate" ip netns exec "$ns"     # host -> bridge
        _shape "$ns-br" "$rate"                     # bridge -> host
    done
    echo "up: $n hosts ($NET.1-$NET.$n, namespaces $PREFIX""1-$PREFIX$n), each link $rate each way"
}

_agent() {
    # Open MPI calls its rsh agent as `agent [ssh options] HOST COMMAND...`, COMMAND for a shell
    while [[ $# -gt 0 && $1 == -* ]]; do shift; done
    local host=$1
    shift
    local i=${host##*.}
    [[ $host == "$NET.$i" && $i =~ ^[0-9]+$ ]] || { echo "agent: unknown host $host" >&2; exit 2; }
    exec ip netns exec "$PREFIX$i" unshare --uts /bin/sh -c "hostname $PREFIX$i && exec /bin/sh -c \"\$0\"" "$*"
}

_env() {
    local self
    self=$(readlink -f "$0")
    cat <<EOF
OMPI_MCA_plm_rsh_agent=$self agent
OMPI_MCA_plm_rsh_no_tree_spawn=1
OMPI_MCA_btl=self,tcp
OMPI_MCA_btl_tcp_if_include=$NET.0/24
OMPI_MCA_oob_tcp_if_include=$NET.0/24
EOF
}

case "${1:-}" in
    up) _up "${2:?up N RATE}" "${3:?up N RATE}" ;;
    down) _down ;;
    agent) shift; _agent "$@" ;;
    env) _env ;;
    *) echo "usage: $0 up N RATE | down | agent HOST CMD... | env" >&2; exit 2 ;;
esac
