#!/usr/bin/env bash
# A cluster in a box: N emulated nodes on one machine under real Slurm.
#
#   scripts/cluster-box.sh up N [--link RATE] [--latency D] [--cpus-per-node C] [--sge]
#   scripts/cluster-box.sh down        # leaves no namespace, link, bridge, qdisc, cgroup or daemon
#   scripts/cluster-box.sh status      # the box's settings and sinfo; exit 0 when every node is up
#   scripts/cluster-box.sh check       # prove the box's isolation (compute, links); prints a table
#   scripts/cluster-box.sh kill-node nI   # lose node nI: its slurmd, steps and ranks killed (and
#                                         # with --sge its execd; its queue instance disabled)
#   scripts/cluster-box.sh revive-node nI # its daemons again, the node back in service
#   scripts/cluster-box.sh agent HOST CMD...  # Open MPI's rsh agent: run CMD on node HOST (n3 or
#                                              # 10.77.0.3), for mpirun across the box without Slurm
#   scripts/cluster-box.sh env         # the Open MPI settings a job on the box needs (and Grid
#                                      # Engine's SGE_ROOT/SGE_CELL where it is up)
#
# Each node nI (I = 1..N, N <= 16: more than the host can train on, for runs that only exchange)
# is
#   - a network namespace hpcdl-nI with its own UTS hostname nI and address 10.77.0.I/24 on eth0,
#     one end of a veth pair whose other end joins the bridge hpcdl-box (10.77.0.254, where
#     slurmctld listens); both directions of the link are shaped to RATE (tbf) and delayed by D/2
#     (netem), so node to node is RATE each way and D one way. The namespaces have no route outside
#     10.77.0.0/24;
#   - a CPU cgroup hpcdl-box/nI whose quota is C cores (cgroup v1 cpu.cfs_quota_us, v2 cpu.max);
#   - a slurmd started inside both, so every job step and rank on nI runs in nI's namespace and
#     cgroup (ProctrackType=proctrack/linuxproc keeps them children of slurmd).
# munged and slurmctld run in the machine's own namespace; munge's socket is a path and the
# bridge's address is the controller's, so every node reaches both. With --sge, Grid Engine runs
# beside Slurm on the same nodes (scripts/box-sge.sh): sge_qmaster on the bridge, one sge_execd per
# node inside its namespace and cgroup, a queue box.q and parallel environments mpi and mpi-fill.
#
# Defaults: RATE 1gbit, D 0 (no delay), C = 80% of the machine's cores / N, leaving a fifth of the
# machine to the kernel's network work (veth, tbf, TCP: softirq time no node's quota pays for) and
# to the daemons. The settings are written to /run/hpcdl-box/box.json, which ranks read to record
# where they ran; `check` writes check.json beside it, and studies on the box refuse to start
# unless it passed on this box.
#
# Exit status: 0 done; 1 something failed (its log is shown); 2 bad usage; 3 the box cannot be made
# here (not root, no namespaces, no cgroups, no Slurm packages): the message says why, and the
# tests that need the box skip with it.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
SELF="$ROOT/scripts/cluster-box.sh"
PREFIX=hpcdl-n                 # namespace hpcdl-nI; veth hpcdl-nI-br on the bridge
BRIDGE=hpcdl-box
NET=10.77.0
CTL_IP=$NET.254
RUN=/run/hpcdl-box
BOXFILE=$RUN/box.json
CG_NAME=hpcdl-box
PARTITION="${HPCDL_SLURM_PARTITION:-debug}"
PORT=6818
CONF_DIR=/etc/slurm
CONF="$CONF_DIR/slurm.conf"
MARK="# written by hpcdl scripts/cluster-box.sh"
STATE=/var/spool/slurmctld
SPOOL=/var/spool/slurmd
LOGS=/var/log/slurm
TMPFS=/tmp/slurmtmp
JOBCOMP="$LOGS/jobcomp.log"
HOST="$(hostname -s)"
# shellcheck source=scripts/box-sge.sh
. "$ROOT/scripts/box-sge.sh"

log() { printf '[cluster-box] %s\n' "$*" >&2; }
cannot() { printf '[cluster-box] cannot make the box here: %s\n' "$*" >&2; exit 3; }
die() { printf '[cluster-box] error: %s\n' "$*" >&2; exit 1; }
usage() { sed -n '3,14p' "$SELF" | sed 's/^# \{0,1\}//' >&2; exit 2; }

# A zombie counts as gone: where nothing reaps orphans (a container's init), ended daemons stay
# zombies, and kill -0 still succeeds on them.
alive() {
    [ -n "${1:-}" ] && kill -0 "$1" 2>/dev/null || return 1
    [ "$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null)" != Z ]
}
all_gone() { local p; for p in "$@"; do alive "$p" && return 1; done; return 0; }
pid_of() { [ -f "$1" ] && cat "$1" 2>/dev/null || true; }

# Wait until a command succeeds, at most $1 seconds.
wait_for() {
    local limit=$1; shift
    local end=$(( $(date +%s) + limit ))
    until "$@"; do
        [ "$(date +%s)" -lt "$end" ] || return 1
        sleep 0.2
    done
}

show_log() { [ -f "$1" ] && tail -n 20 "$1" | sed 's/^/    /' >&2 || true; }

# ---------------------------------------------------------------- packages, munge, Slurm config

ensure_packages() {
    local missing=() cmd
    for cmd in slurmctld slurmd sbatch munged; do command -v "$cmd" >/dev/null || missing+=("$cmd"); done
    [ ${#missing[@]} = 0 ] && return 0
    command -v apt-get >/dev/null || cannot "Slurm is not installed (missing: ${missing[*]}) and there is no apt-get"
    log "installing slurmctld slurmd slurm-client munge with apt"
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
        slurmctld slurmd slurm-client munge >/dev/null 2>&1 \
        || cannot "apt-get install slurmctld slurmd slurm-client munge failed"
}

start_munge() {
    if munge -n 2>/dev/null | unmunge >/dev/null 2>&1; then return 0; fi
    mkdir -p /etc/munge /run/munge /var/lib/munge /var/log/munge
    if [ ! -s /etc/munge/munge.key ]; then
        mungekey -c -k /etc/munge/munge.key >/dev/null 2>&1 \
            || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
    fi
    chmod 0400 /etc/munge/munge.key
    chown -R munge:munge /etc/munge /run/munge /var/lib/munge /var/log/munge
    chmod 0755 /run/munge
    runuser -u munge -- /usr/sbin/munged || die "munged did not start (see /var/log/munge/munged.log)"
    wait_for 10 sh -c 'munge -n | unmunge >/dev/null 2>&1' || die "munge does not answer"
}

stop_munge() {
    local p
    p="$(pid_of /run/munge/munged.pid)"
    if alive "$p"; then
        kill -TERM "$p" 2>/dev/null || true
        wait_for 10 all_gone "$p" || kill -KILL "$p" 2>/dev/null || true
    fi
}

write_conf() {  # write_conf N SLURM_CPUS
    local n=$1 cpus=$2 k
    if [ -f "$CONF" ] && ! grep -qF "# written by hpcdl scripts/" "$CONF" && [ "${HPCDL_SLURM_FORCE:-0}" != 1 ]; then
        cannot "$CONF exists and was not written by this script (set HPCDL_SLURM_FORCE=1 to replace it)"
    fi
    mkdir -p "$CONF_DIR"
    local tmp="$CONF.tmp.$$"
    {
        echo "$MARK: a box of $n nodes on $HOST"
        cat <<EOF
ClusterName=hpcdl
SlurmctldHost=$HOST($CTL_IP)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
# A requeued job waits cred_expire + 1 s before it may start again (default 120 s)
AuthInfo=cred_expire=10
StateSaveLocation=$STATE
SlurmdSpoolDir=$SPOOL/%n
SlurmctldPidFile=/run/slurmctld.pid
SlurmdPidFile=/run/slurmd-%n.pid
SlurmctldLogFile=$LOGS/slurmctld.log
SlurmdLogFile=$LOGS/slurmd-%n.log
SlurmdPort=$PORT
# pmix wants a temp dir per node (nodes share the file system)
TmpFS=$TMPFS/%n
# linuxproc keeps every step a child of its node's slurmd: in the node's namespace and cgroup
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
# Look at pending jobs every second or two (defaults 60 s and 30 s): a requeued job starts
# as soon as it may, not on the next minute.
SchedulerParameters=sched_interval=1,bf_interval=2
MpiDefault=none
AccountingStorageType=accounting_storage/none
# jobacct_gather/cgroup would want cgroup mounts of its own inside the node
JobAcctGatherType=jobacct_gather/none
# sacct -c reads job states and exit codes from here
JobCompType=jobcomp/filetxt
JobCompLoc=$JOBCOMP
MailProg=/bin/true
ReturnToService=2
SlurmdParameters=config_overrides
# without it a job whose dependency can never be met waits forever (22.05)
DependencyParameters=kill_invalid_depend
InactiveLimit=0
KillWait=10
MinJobAge=600
# a node whose slurmd is gone is marked down after this many seconds
SlurmdTimeout=30
# The nodes share one machine's cores, so two jobs at once would slow each other: every job of a
# study asks for this one licence (hpcdl study submit adds --licenses=box:1 on the box).
Licenses=box:1
EOF
        for k in $(seq 1 "$n"); do
            echo "NodeName=n$k NodeHostname=n$k NodeAddr=$NET.$k CPUs=$cpus RealMemory=1000 State=UNKNOWN"
        done
        echo "PartitionName=$PARTITION Nodes=n[1-$n] Default=YES MaxTime=INFINITE State=UP"
    } >"$tmp"
    mv "$tmp" "$CONF"
}

ctld_pid() { pid_of /run/slurmctld.pid; }

stop_slurm() {
    local pids=() p f
    p="$(ctld_pid)"; alive "$p" && pids+=("$p")
    for f in /run/slurmd-*.pid; do
        [ -f "$f" ] || continue
        p="$(pid_of "$f")"; alive "$p" && pids+=("$p")
    done
    [ ${#pids[@]} = 0 ] && return 0
    if alive "$(ctld_pid)"; then
        # Cancel what is left so no job step outlives its slurmd.
        local jobs
        jobs="$(timeout 10 squeue -h -o '%i' 2>/dev/null || true)"
        if [ -n "$jobs" ]; then
            log "cancelling leftover jobs: $(echo $jobs)"
            scancel $jobs 2>/dev/null || true
            wait_for 20 sh -c '[ -z "$(timeout 5 squeue -h -t running,completing -o %i 2>/dev/null)" ]' || true
        fi
        timeout 10 scontrol shutdown >/dev/null 2>&1 || true
    else
        kill -TERM "${pids[@]}" 2>/dev/null || true     # no slurmctld to pass the shutdown on
    fi
    # Daemons that outlive the shutdown (or a slurmctld that had died) get TERM, then KILL.
    wait_for 15 all_gone "${pids[@]}" || {
        kill -TERM "${pids[@]}" 2>/dev/null || true
        wait_for 5 all_gone "${pids[@]}" || kill -KILL "${pids[@]}" 2>/dev/null || true
    }
    rm -f /run/slurmctld.pid /run/slurmd-*.pid
}

nodes_idle() {  # nodes_idle N
    [ "$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)" -ge "$1" ]
}

# ---------------------------------------------------------------- cgroups

cg_version() {  # 1 when the v1 cpu controller is mounted, 2 for a unified hierarchy with cpu
    if [ -f /sys/fs/cgroup/cpu/cpu.cfs_quota_us ]; then echo 1
    elif [ -f /sys/fs/cgroup/cgroup.controllers ] && grep -qw cpu /sys/fs/cgroup/cgroup.controllers; then echo 2
    else echo 0; fi
}

cg_dir() {  # cg_dir [NODE]: the box's cgroup (or one node's) in this machine's cpu hierarchy
    local base
    case "$(cg_version)" in
        1) base=/sys/fs/cgroup/cpu/$CG_NAME ;;
        2) base=/sys/fs/cgroup/$CG_NAME ;;
        *) return 1 ;;
    esac
    echo "$base${1:+/$1}"
}

# The quota's period: 5 ms, or longer where the quota would be under the kernel's least (1 ms of
# CPU), so 5 ms at 0.2 cores and up, 10 ms at 0.1. Shorter periods lose quota: with 1 or 2 ms
# periods a one-core node ran a single thread at 0.56-0.66 of a core, with 2 ms a half-core node
# at 0.4; 5 ms gave the whole quota at 0.2, 0.5 and 1 core (results/quota-period.txt). Longer
# periods stall: a rank whose share is spent waits for the next period, and nothing feeds its
# sockets meanwhile, and Open MPI progresses TCP from the rank's own threads, which spin: the
# longer the period, the longer those gaps. With 100 ms periods and 0.4 cores a ring allreduce
# kept its links 81% busy, with 10 ms 93% (5 ms at 0.2 cores: 95%). At 0.2 cores, 2 nodes of
# box-cnn-weak's workload, alternating runs: 10 ms periods made the step 1.12x as long as 5 ms
# (results/box-cpu-period.txt); in earlier runs up to 1.4x, one rank's compute taking a third more
# CPU with Horovod's background loop spinning beside it.
cg_period() {  # cg_period CORES: the quota's period in microseconds
    awk -v c="$1" 'BEGIN { p = int(1000 / c + 0.999); if (p < 5000) p = 5000; if (p > 100000) p = 100000; print p }'
}

cg_make() {  # cg_make NODE CORES: a cgroup whose quota is CORES cores
    local dir quota period
    dir="$(cg_dir "$1")"
    period="$(cg_period "$2")"
    quota="$(awk -v c="$2" -v p="$period" 'BEGIN { printf "%d", c * p }')"
    mkdir -p "$dir"
    if [ "$(cg_version)" = 1 ]; then
        echo "$period" >"$dir/cpu.cfs_period_us"
        echo "$quota" >"$dir/cpu.cfs_quota_us"
    else
        grep -qw cpu "$(dirname "$dir")/cgroup.subtree_control" || echo +cpu >"$(dirname "$dir")/cgroup.subtree_control"
        echo "$quota $period" >"$dir/cpu.max"
    fi
}

cg_remove() {  # every process left in the box's cgroups is killed, then the groups removed
    local base d pids
    base="$(cg_dir)" || return 0
    [ -d "$base" ] || return 0
    for d in "$base"/*/; do
        [ -d "$d" ] || continue
        pids="$(cat "$d/cgroup.procs" 2>/dev/null || true)"
        [ -n "$pids" ] && kill -KILL $pids 2>/dev/null || true
    done
    for d in "$base"/*/; do
        [ -d "$d" ] || continue
        wait_for 5 sh -c "[ -z \"\$(cat '$d/cgroup.procs' 2>/dev/null)\" ]" || true
        rmdir "$d" 2>/dev/null || log "warning: could not remove cgroup $d"
    done
    rmdir "$base" 2>/dev/null || true
}

# ---------------------------------------------------------------- network

net_down() {
    local ns dev
    for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^$PREFIX[0-9]*$" || true); do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null || true
        ip netns del "$ns" 2>/dev/null || true
    done
    # deleting a namespace deletes its veth end and so the pair; remove leftovers of a half run
    for dev in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 \
                 | grep "^${PREFIX}[0-9]*-br$" || true); do
        ip link del "$dev" 2>/dev/null || true
    done
    if ip link show "$BRIDGE" >/dev/null 2>&1; then ip link del "$BRIDGE"; fi
}

shape() {  # shape DEV RATE DELAY [netns]: DEV's egress at RATE (tbf), after DELAY (netem)
    # One token bucket per direction, burst enough for GSO segments. (An htb with the pure
    # acknowledgements in a class ahead of the data did worse: 82% of the rate against 93% for
    # the 8-node ring allreduce of `check`.)
    local dev=$1 rate=$2 delay=$3 ns=${4:-}
    local tc=(tc); [ -n "$ns" ] && tc=(tc -n "$ns")
    "${tc[@]}" qdisc del dev "$dev" root 2>/dev/null || true
    if [ "$delay" != 0 ]; then
        "${tc[@]}" qdisc add dev "$dev" root handle 1: netem delay "$delay" limit 100000
        "${tc[@]}" qdisc add dev "$dev" parent 1:1 handle 10: tbf rate "$rate" burst 256kb latency 50ms
    else
        "${tc[@]}" qdisc add dev "$dev" root handle 10: tbf rate "$rate" burst 256kb latency 50ms
    fi
}

have_netem() {  # the kernel can delay packets (sch_netem); not every kernel is built with it
    local ok=1
    ip link add hpcdl-probe0 type veth peer name hpcdl-probe1 2>/dev/null || return 1
    tc qdisc add dev hpcdl-probe0 root netem delay 1ms 2>/dev/null && ok=0
    ip link del hpcdl-probe0 2>/dev/null || true
    return $ok
}

half_delay() {  # half_delay D: D/2 in microseconds for netem ("0" when D is 0)
    local us
    us="$(awk -v d="$1" 'BEGIN {
        if (d ~ /us$/) v = d + 0; else if (d ~ /ms$/) v = (d + 0) * 1000;
        else if (d ~ /s$/) v = (d + 0) * 1000000; else v = (d + 0) * 1000;
        printf "%d", v / 2 }')"
    [ "$us" = 0 ] && echo 0 || echo "${us}us"
}

net_up() {  # net_up N RATE DELAY
    local n=$1 rate=$2 delay i ns
    delay="$(half_delay "$3")"
    ip link add "$BRIDGE" type bridge || cannot "ip link add (network namespaces and bridges need CAP_NET_ADMIN)"
    ip addr add "$CTL_IP/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    for i in $(seq 1 "$n"); do
        ns=$PREFIX$i
        ip netns add "$ns" || cannot "ip netns add $ns failed"
        ip link add "$ns-br" type veth peer name "$ns-eth"
        ip link set "$ns-eth" netns "$ns"
        ip link set "$ns-br" master "$BRIDGE" up
        ip -n "$ns" link set lo up
        ip -n "$ns" link set "$ns-eth" name eth0
        ip -n "$ns" addr add "$NET.$i/24" dev eth0
        ip -n "$ns" link set eth0 up
        # the barrier between timed steps idles each connection: keep its window
        ip netns exec "$ns" sysctl -q net.ipv4.tcp_slow_start_after_idle=0
        # windows large enough to keep a link busy through the shaper's queue and delay
        ip netns exec "$ns" sysctl -q net.ipv4.tcp_rmem="4096 131072 33554432" \
            net.ipv4.tcp_wmem="4096 65536 33554432"
        # a loss-based congestion control on the subnet's route, whatever the machine's default:
        # under BBR a ring's pair of connections, each carrying data one way and the other's
        # acknowledgements behind the queue, kept falling to two thirds of the link
        if grep -qw cubic /proc/sys/net/ipv4/tcp_available_congestion_control; then
            ip -n "$ns" route replace "$NET.0/24" dev eth0 proto kernel scope link src "$NET.$i" congctl cubic
        fi
        shape eth0 "$rate" "$delay" "$ns"      # node -> bridge
        shape "$ns-br" "$rate" "$delay"        # bridge -> node
    done
}

# ---------------------------------------------------------------- up / down / status

start_slurmd() {  # start_slurmd I: node nI's slurmd inside its namespace and cgroup
    local k=$1
    # nsenter, not `ip netns exec`: that remounts /sys, hiding the cgroup mounts from slurmd
    nsenter --net="/var/run/netns/$PREFIX$k" unshare --uts sh -c \
        "echo \$\$ >'$(cg_dir "n$k")/cgroup.procs' && hostname n$k && exec slurmd -N n$k" \
        || { show_log "$LOGS/slurmd-n$k.log"; die "slurmd on n$k did not start"; }
}

kill_node() {  # kill_node I: node nI is lost: its slurmd, steps and ranks killed at once
    local k=${1#n}
    [ -e "/var/run/netns/$PREFIX$k" ] || die "node n$k is not up"
    # Grid Engine notices a lost node only once it has been unheard for max_unheard (30 s) and
    # places jobs on it until then; such a job hangs in qrsh -inherit to the dead execd and stays
    # there when the node comes back. Its queue instance is disabled first, as a site's health
    # check would, so nothing lands on the node until revive-node (running jobs are not touched).
    if [ -d "$SGE_SPOOL" ]; then (sge_env; qmod -d "box.q@n$k" >/dev/null) || die "qmod -d box.q@n$k failed"; fi
    ip netns pids "$PREFIX$k" | xargs -r kill -KILL
    rm -f "/run/slurmd-n$k.pid"
    rm -f "$SGE_SPOOL/execd/n$k/execd.pid"
    log "n$k: every process in its namespace killed"
}

revive_node() {  # revive_node I: a killed node's slurmd again, and the node back in service
    local k=${1#n}
    [ -e "/var/run/netns/$PREFIX$k" ] || die "node n$k is not up"
    alive "$(pid_of "/run/slurmd-n$k.pid")" || start_slurmd "$k"
    if [ -d "$SGE_SPOOL" ]; then
        sge_env
        alive "$(pid_of "$SGE_SPOOL/execd/n$k/execd.pid")" || sge_start_execd "$k"
        qmod -e "box.q@n$k" >/dev/null || die "qmod -e box.q@n$k failed"
    fi
    wait_for 30 sh -c "scontrol show node n$k | grep -q 'State=[A-Z]*\(IDLE\|DOWN\)'" || true
    scontrol update NodeName="n$k" State=RESUME >/dev/null 2>&1 || true
    wait_for 60 sh -c "sinfo -h -N -n n$k -o %t | grep -qx idle" || die "n$k did not become idle"
    log "n$k: back in service"
}

write_boxfile() {  # write_boxfile N RATE LATENCY CORES SLURM_CPUS SGE
    mkdir -p "$RUN"
    local k nodes="" sge=null
    [ "$6" = 1 ] && sge="{\"root\": \"$SGE_ROOT_DIR\", \"cell\": \"$SGE_CELL_NAME\", \"queue\": \"box.q\", \"pe\": \"mpi\", \"consumable\": \"box\"}"
    for k in $(seq 1 "$1"); do nodes="$nodes${nodes:+, }\"n$k\": {\"addr\": \"$NET.$k\", \"iface\": \"eth0\", \"netns\": \"$PREFIX$k\", \"cgroup\": \"$(cg_dir "n$k")\"}"; done
    cat >"$BOXFILE.tmp" <<EOF
{"box": "$(date +%s)-$$", "nodes_count": $1, "link_rate": "$2", "latency": "$3",
 "cpus_per_node": $4, "cpu_period_us": $(cg_period "$4"), "slurm_cpus": $5, "subnet": "$NET.0/24",
 "cgroup_version": $(cg_version),
 "licence": "box", "sge": $sge,
 "host": "$HOST", "cores": $(nproc), "nodes": {$nodes}}
EOF
    mv "$BOXFILE.tmp" "$BOXFILE"
    rm -f "$RUN/check.json"
}

down() {
    local t0=$SECONDS
    if command -v scontrol >/dev/null; then stop_slurm; fi
    sge_down
    cg_remove
    net_down
    stop_munge
    rm -rf "$RUN" "${TMPFS:?}"
    log "down ($((SECONDS - t0)) s)"
}

up() {
    local n="" rate=1gbit latency=0 cores="" sge=0 t0=$SECONDS k
    while [ $# -gt 0 ]; do
        case "$1" in
            --link) rate=$2; shift 2 ;;
            --latency) latency=$2; shift 2 ;;
            --cpus-per-node) cores=$2; shift 2 ;;
            --sge) sge=1; shift ;;
            -h|--help) usage ;;
            *) [ -z "$n" ] && [[ $1 =~ ^[0-9]+$ ]] || usage; n=$1; shift ;;
        esac
    done
    [ -n "$n" ] && [ "$n" -ge 1 ] && [ "$n" -le 16 ] || { log "up: N must be 1..16"; exit 2; }
    [[ $rate =~ ^[0-9.]+([kmg]?bit)$ ]] || { log "up: --link takes a tc rate such as 200mbit or 1gbit"; exit 2; }
    [[ $latency =~ ^[0-9.]+(us|ms|s)?$ ]] || { log "up: --latency takes a delay such as 100us or 1ms"; exit 2; }
    [ -n "$cores" ] || cores="$(awk -v c="$(nproc)" -v n="$n" 'BEGIN { printf "%.3g", 0.8 * c / n }')"
    awk -v c="$cores" 'BEGIN { exit !(c > 0.01) }' || { log "up: --cpus-per-node must be a positive number of cores"; exit 2; }
    [ "$(id -u)" = 0 ] || cannot "the box needs root (namespaces, tc, cgroups, Slurm daemons as root); this is uid $(id -u)"
    for c in ip tc nsenter unshare; do command -v "$c" >/dev/null || cannot "$c is not installed"; done
    if [ "$(half_delay "$latency")" != 0 ] && ! have_netem; then
        log "up: this kernel has no netem qdisc, so --latency cannot be emulated here (links keep"
        log "    the veth's own latency, tens of microseconds); leave --latency out"
        exit 2
    fi
    [ "$(cg_version)" != 0 ] || cannot "no cgroup cpu controller is mounted (v1 /sys/fs/cgroup/cpu or v2 with cpu)"
    ensure_packages
    [ "$sge" = 0 ] || sge_ensure_packages
    ls /usr/lib/*/slurm*/mpi_pmix*.so >/dev/null 2>&1 || log "warning: Slurm's pmix plugin not found; srun --mpi=pmix will fail"
    local slurm_cpus
    slurm_cpus="$(awk -v c="$cores" 'BEGIN { v = int(c); if (v < c) v++; if (v < 1) v = 1; print v }')"

    down 2>/dev/null                     # every up is fresh: the same box whatever was there
    start_munge
    net_up "$n" "$rate" "$latency"
    write_conf "$n" "$slurm_cpus"
    rm -rf "${STATE:?}"/* "${SPOOL:?}"/*
    mkdir -p "$STATE" "$LOGS"
    : >"$JOBCOMP"
    : >"$LOGS/slurmctld.log"
    slurmctld || { show_log "$LOGS/slurmctld.log"; die "slurmctld did not start"; }
    wait_for 15 scontrol ping >/dev/null 2>&1 || { show_log "$LOGS/slurmctld.log"; die "slurmctld does not answer"; }
    for k in $(seq 1 "$n"); do
        mkdir -p "$SPOOL/n$k" "$TMPFS/n$k"
        : >"$LOGS/slurmd-n$k.log"
        cg_make "n$k" "$cores"
        start_slurmd "$k"
    done
    write_boxfile "$n" "$rate" "$latency" "$cores" "$slurm_cpus" "$sge"
    if ! wait_for 60 nodes_idle "$n"; then
        sinfo -N >&2 || true
        show_log "$LOGS/slurmctld.log"
        die "not every node became idle within 60 s"
    fi
    [ "$sge" = 0 ] || sge_up "$n" "$slurm_cpus"
    log "up: $n nodes n1..n$n ($NET.1-$n), links $rate each way, latency $latency, $cores cores each," \
        "partition $PARTITION$([ "$sge" = 0 ] || echo ", Grid Engine queue box.q") ($((SECONDS - t0)) s)"
}

status() {
    [ -f "$BOXFILE" ] || { log "no box is up"; return 1; }
    cat "$BOXFILE"
    [ -f "$RUN/check.json" ] && echo "check: $(python3 -c 'import json,sys; print("passed" if json.load(open(sys.argv[1]))["passed"] else "FAILED")' "$RUN/check.json")" \
        || echo "check: not run"
    scontrol ping >/dev/null 2>&1 || { log "slurmctld is not running"; return 1; }
    sinfo -N
    if [ -d "$SGE_SPOOL" ]; then (sge_env; qhost); fi
    local n
    n="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["nodes_count"])' "$BOXFILE")"
    [ "$(sinfo -h -N -t idle,alloc,mix -o '%N' | sort -u | wc -l)" -ge "$n" ]
}

agent() {
    # Open MPI calls its rsh agent as `agent [ssh options] HOST COMMAND...`, COMMAND for a shell
    while [[ $# -gt 0 && $1 == -* ]]; do shift; done
    local host=$1 i
    shift
    case "$host" in
        n[0-9]*) i=${host#n} ;;
        "$NET".*) i=${host##*.} ;;
        *) echo "agent: $host is not a node of the box" >&2; exit 2 ;;
    esac
    [ -e "/var/run/netns/$PREFIX$i" ] || { echo "agent: node n$i is not up" >&2; exit 2; }
    exec nsenter --net="/var/run/netns/$PREFIX$i" unshare --uts /bin/sh -c \
        "echo \$\$ >'$(cg_dir "n$i")/cgroup.procs' && hostname n$i && exec /bin/sh -c \"\$0\"" "$*"
}

env_() {
    cat <<EOF
OMPI_MCA_plm_rsh_agent=$SELF agent
OMPI_MCA_plm_rsh_no_tree_spawn=1
OMPI_MCA_btl=self,tcp
OMPI_MCA_btl_tcp_if_include=$NET.0/24
OMPI_MCA_oob_tcp_if_include=$NET.0/24
EOF
    if [ -d "$SGE_SPOOL" ]; then
        echo "SGE_ROOT=$SGE_ROOT_DIR"
        echo "SGE_CELL=$SGE_CELL_NAME"
    fi
}

case "${1:-}" in
    up) shift; up "$@" ;;
    down) down ;;
    status) status ;;
    check) shift; exec "${HPCDL_PYTHON:-$ROOT/.venv/bin/python}" -m hpcdl.bench.boxcheck check "$@" ;;
    kill-node) kill_node "${2:?kill-node nI}" ;;
    revive-node) revive_node "${2:?revive-node nI}" ;;
    agent) shift; agent "$@" ;;
    env) env_ ;;
    *) usage ;;
esac
