#!/usr/bin/env bash
# Start or stop a real single-machine Slurm cluster: munge, slurmctld and N slurmd as nodes n1..nN.
#
#   scripts/slurm-cluster.sh start     # (re)start from a clean state; idempotent
#   scripts/slurm-cluster.sh stop      # cancel jobs, shut down slurmctld + slurmd, stop munged
#   scripts/slurm-cluster.sh status    # exit 0 when every node is up
#
# Every daemon runs on this host; each slurmd plays one node with its own name, port, spool and
# temp directory (what lets several slurmd share a host; see the notes in the repository's docs).
# Jobs run as root. Debian's slurmctld, slurmd, slurm-client and munge are installed with apt when
# missing and this runs as root.
#
# Environment:
#   HPCDL_SLURM_NODES      number of nodes (default 4)
#   HPCDL_SLURM_CPUS       CPUs each node claims (default: the host's core count, at least 2)
#   HPCDL_SLURM_PARTITION  the one partition's name (default debug)
#   HPCDL_SLURM_PORT       first slurmd port; node k listens on PORT+k (default 17000)
#   HPCDL_SLURM_FORCE=1    overwrite an /etc/slurm/slurm.conf this script did not write
#
# Exit status: 0 done; 1 a daemon failed (its log is shown); 3 Slurm cannot run here (not root,
# no packages): the message says why, and the Slurm tests skip with it.
set -euo pipefail

NODES="${HPCDL_SLURM_NODES:-4}"
CPUS="${HPCDL_SLURM_CPUS:-$(nproc)}"
[ "$CPUS" -ge 2 ] || CPUS=2
PARTITION="${HPCDL_SLURM_PARTITION:-debug}"
PORT="${HPCDL_SLURM_PORT:-17000}"
CONF_DIR=/etc/slurm
CONF="$CONF_DIR/slurm.conf"
MARK="# written by hpcdl scripts/slurm-cluster.sh"
STATE=/var/spool/slurmctld
SPOOL=/var/spool/slurmd
LOGS=/var/log/slurm
TMPFS=/tmp/slurmtmp
JOBCOMP="$LOGS/jobcomp.log"
HOST="$(hostname -s)"

log() { printf '[slurm-cluster] %s\n' "$*" >&2; }
cannot() { printf '[slurm-cluster] cannot run Slurm here: %s\n' "$*" >&2; exit 3; }
die() { printf '[slurm-cluster] error: %s\n' "$*" >&2; exit 1; }

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

ensure_packages() {
    local missing=()
    for cmd in slurmctld slurmd sbatch munged; do command -v "$cmd" >/dev/null || missing+=("$cmd"); done
    [ ${#missing[@]} = 0 ] && return 0
    [ "$(id -u)" = 0 ] || cannot "not root and Slurm is not installed (missing: ${missing[*]})"
    command -v apt-get >/dev/null || cannot "Slurm is not installed (missing: ${missing[*]}) and there is no apt-get"
    log "installing slurmctld slurmd slurm-client munge with apt"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
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

write_conf() {
    if [ -f "$CONF" ] && ! grep -qF "$MARK" "$CONF" && [ "${HPCDL_SLURM_FORCE:-0}" != 1 ]; then
        cannot "$CONF exists and was not written by this script (set HPCDL_SLURM_FORCE=1 to replace it)"
    fi
    mkdir -p "$CONF_DIR"
    local tmp="$CONF.tmp.$$"
    {
        echo "$MARK: a test cluster of $NODES nodes on $HOST"
        cat <<EOF
ClusterName=hpcdl
SlurmctldHost=$HOST(127.0.0.1)
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
# pmix needs a temp dir per node when several slurmd share a host
TmpFS=$TMPFS/%n
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
SlurmdTimeout=60
EOF
        local k
        for k in $(seq 1 "$NODES"); do
            echo "NodeName=n$k NodeHostname=$HOST NodeAddr=127.0.0.1 Port=$((PORT + k)) CPUs=$CPUS RealMemory=1000 State=UNKNOWN"
        done
        echo "PartitionName=$PARTITION Nodes=n[1-$NODES] Default=YES MaxTime=INFINITE State=UP"
    } >"$tmp"
    mv "$tmp" "$CONF"
}

nodes_idle() {
    [ "$(sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)" -ge "$NODES" ]
}

ctld_pid() { pid_of /run/slurmctld.pid; }

stop_slurm() {
    local pids=() p k
    p="$(ctld_pid)"; alive "$p" && pids+=("$p")
    for f in /run/slurmd-*.pid; do
        [ -f "$f" ] || continue
        p="$(pid_of "$f")"; alive "$p" && pids+=("$p")
    done
    [ ${#pids[@]} = 0 ] && return 0
    if alive "$(ctld_pid)"; then
        # Cancel what is left so no job step outlives its slurmd.
        local jobs
        jobs="$(squeue -h -o '%i' 2>/dev/null || true)"
        if [ -n "$jobs" ]; then
            log "cancelling leftover jobs: $(echo $jobs)"
            scancel $jobs 2>/dev/null || true
            wait_for 20 sh -c '[ -z "$(squeue -h -t running,completing -o %i 2>/dev/null)" ]' || true
        fi
        scontrol shutdown >/dev/null 2>&1 || true
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

stop_munge() {
    local p
    p="$(pid_of /run/munge/munged.pid)"
    if alive "$p"; then
        kill -TERM "$p" 2>/dev/null || true
        wait_for 10 all_gone "$p" || kill -KILL "$p" 2>/dev/null || true
    fi
}

show_log() { [ -f "$1" ] && tail -n 20 "$1" | sed 's/^/    /' >&2 || true; }

start() {
    local t0=$SECONDS k
    [ "$(id -u)" = 0 ] || cannot "the test cluster runs its daemons and jobs as root, and this is uid $(id -u)"
    ensure_packages
    command -v mpirun >/dev/null && ! ls /usr/lib/x86_64-linux-gnu/slurm-wlm/mpi_pmix*.so >/dev/null 2>&1 \
        && ! ls /usr/lib/*/slurm*/mpi_pmix*.so >/dev/null 2>&1 \
        && log "warning: Slurm's pmix plugin not found; srun --mpi=pmix will fail"
    # A cluster left by an earlier session is stopped and its state wiped: every start is fresh.
    stop_slurm
    start_munge
    write_conf
    rm -rf "${STATE:?}"/* "${SPOOL:?}"/* "${TMPFS:?}"/*
    mkdir -p "$STATE" "$LOGS"
    : >"$JOBCOMP"
    : >"$LOGS/slurmctld.log"
    slurmctld || { show_log "$LOGS/slurmctld.log"; die "slurmctld did not start"; }
    wait_for 15 scontrol ping >/dev/null 2>&1 || { show_log "$LOGS/slurmctld.log"; die "slurmctld does not answer"; }
    for k in $(seq 1 "$NODES"); do
        mkdir -p "$SPOOL/n$k" "$TMPFS/n$k"
        : >"$LOGS/slurmd-n$k.log"
        slurmd -N "n$k" || { show_log "$LOGS/slurmd-n$k.log"; die "slurmd -N n$k did not start"; }
    done
    if ! wait_for 60 nodes_idle; then
        sinfo -N >&2 || true
        show_log "$LOGS/slurmctld.log"
        die "not every node became idle within 60 s"
    fi
    log "up: $NODES nodes (n1..n$NODES, $CPUS CPUs each) on $HOST, partition $PARTITION ($((SECONDS - t0)) s)"
}

stop() {
    local t0=$SECONDS
    command -v scontrol >/dev/null || { log "Slurm is not installed: nothing to stop"; return 0; }
    stop_slurm
    stop_munge
    log "stopped ($((SECONDS - t0)) s)"
}

status() {
    command -v sinfo >/dev/null || { log "Slurm is not installed"; return 1; }
    scontrol ping >/dev/null 2>&1 || { log "slurmctld is not running"; return 1; }
    sinfo -N
    nodes_idle || [ "$(sinfo -h -N -t idle,alloc,mix -o '%N' | sort -u | wc -l)" -ge "$NODES" ]
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    restart) stop; start ;;
    status) status ;;
    *) echo "usage: $0 start|stop|restart|status" >&2; exit 2 ;;
esac
