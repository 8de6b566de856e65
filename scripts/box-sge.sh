# Grid Engine in the cluster box: sourced by scripts/cluster-box.sh (`up N --sge`), not run alone.
#
# Debian's Son of Grid Engine 8.1.9 beside the box's Slurm, on the same nodes:
#   - a cell of its own, hpcdl-box ($SGE_ROOT/hpcdl-box, spool /var/spool/gridengine/hpcdl-box),
#     so the packages' default cell is left as it was;
#   - sge_qmaster in the machine's own namespace, known to the nodes as boxctl (the bridge's
#     address); one sge_execd per node inside the node's namespace and CPU cgroup, like its slurmd;
#   - names both ways in /etc/hosts (boxctl and n1..nN, between marker lines removed on down):
#     Grid Engine resolves every peer's address back to a name and refuses a mismatch;
#   - a queue box.q with the nodes' slots, and two parallel environments with tight integration
#     (control_slaves TRUE: mpirun starts its daemons with `qrsh -inherit`, which Grid Engine
#     accounts and kills with the job, not through ssh): `mpi` one slot per node, `mpi-fill` the
#     slots of a node before the next;
#   - a global consumable `box` of 1, which every job of a study asks for (-l box=1), so that no
#     two of them run at once, as the Slurm licence does.
# Traps met on the way are in docs/cluster-box.md.

SGE_ROOT_DIR=/var/lib/gridengine
SGE_CELL_NAME=hpcdl-box
SGE_SPOOL=/var/spool/gridengine/$SGE_CELL_NAME
SGE_HOSTS_MARK="# hpcdl cluster box"

sge_env() {  # the environment every Grid Engine command of the box runs with
    export SGE_ROOT=$SGE_ROOT_DIR SGE_CELL=$SGE_CELL_NAME SGE_QMASTER_PORT=6444 SGE_EXECD_PORT=6445
}

sge_have() {
    command -v sge_qmaster >/dev/null && command -v sge_execd >/dev/null && command -v qsub >/dev/null
}

sge_ensure_packages() {
    sge_have && return 0
    command -v apt-get >/dev/null || cannot "Grid Engine is not installed and there is no apt-get"
    log "installing gridengine-master gridengine-exec gridengine-client with apt"
    # the packages' own cell is configured without questions; the box makes a cell of its own
    {
        echo "gridengine-common shared/gridenginemaster string $HOST"
        echo "gridengine-common shared/gridenginecell string default"
        echo "gridengine-common shared/gridengineconfig boolean true"
    } | debconf-set-selections
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 update -qq >/dev/null 2>&1 || true
    DEBIAN_FRONTEND=noninteractive apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends \
        gridengine-master gridengine-exec gridengine-client >/dev/null 2>&1 \
        || cannot "apt-get install gridengine-master gridengine-exec gridengine-client failed"
    sge_have || cannot "the gridengine packages installed no sge_qmaster/sge_execd/qsub"
}

sge_hosts_up() {  # sge_hosts_up N: names both ways for the bridge and the nodes
    sge_hosts_down
    {
        echo "$SGE_HOSTS_MARK begin"
        echo "$CTL_IP boxctl"
        local k
        for k in $(seq 1 "$1"); do echo "$NET.$k n$k"; done
        echo "$SGE_HOSTS_MARK end"
    } >>/etc/hosts
}

sge_hosts_down() {
    grep -qF "$SGE_HOSTS_MARK begin" /etc/hosts 2>/dev/null || return 0
    # /etc/hosts may be a bind mount: rewrite it in place, never replace the file
    local kept
    kept="$(sed "/$SGE_HOSTS_MARK begin/,/$SGE_HOSTS_MARK end/d" /etc/hosts)"
    printf '%s\n' "$kept" >/etc/hosts
}

sge_qmaster_pid() { pid_of "$SGE_SPOOL/qmaster/qmaster.pid"; }

sge_cell() {  # the cell's files and a fresh spool with the box's global configuration
    local common=$SGE_ROOT_DIR/$SGE_CELL_NAME/common
    rm -rf "${SGE_SPOOL:?}" "$SGE_ROOT_DIR/${SGE_CELL_NAME:?}"
    mkdir -p "$common" "$SGE_SPOOL/spooldb" "$SGE_SPOOL/qmaster" "$SGE_SPOOL/execd"
    # admin_user none: the daemons stay root, as the box's Slurm does
    sed -e "s|^admin_user .*|admin_user              none|" \
        -e "s|^spooling_params .*|spooling_params         $SGE_SPOOL/spooldb|" \
        -e "s|^qmaster_spool_dir .*|qmaster_spool_dir       $SGE_SPOOL/qmaster|" \
        /usr/share/gridengine/default-bootstrap >"$common/bootstrap"
    echo boxctl >"$common/act_qmaster"
    # this machine's own name and localhost are the qmaster's too (its name resolves to 127.0.0.1)
    echo "boxctl $HOST localhost" >"$common/host_aliases"
    echo hpcdl-box >"$common/cluster_name"
    {
        echo "SGE_ROOT=$SGE_ROOT_DIR; export SGE_ROOT"
        echo "SGE_CELL=$SGE_CELL_NAME; export SGE_CELL"
    } >"$common/settings.sh"
    # root submits the tests' jobs (min_uid/min_gid 0); the execd's spool per node below it;
    # load reports every 5 s and a node unheard for 30 s is lost (defaults 40 s and 5 min), its
    # rerunnable jobs (-r y) queued again 30 s later (default: never);
    # ENABLE_ADDGRP_KILL: a job's processes found by their group id too when it is deleted;
    # qacct finds a job's attempt in the accounting file at once (flushed every second, not 15 s)
    sed -e "s|^execd_spool_dir .*|execd_spool_dir        $SGE_SPOOL/execd|" \
        -e "s|^min_uid .*|min_uid                0|" -e "s|^min_gid .*|min_gid                0|" \
        -e "s|^shell_start_mode .*|shell_start_mode       unix_behavior|" \
        -e "s|^load_report_time .*|load_report_time       00:00:05|" \
        -e "s|^max_unheard .*|max_unheard            00:00:30|" \
        -e "s|^reschedule_unknown .*|reschedule_unknown     00:00:30|" \
        -e "s|^execd_params .*|execd_params           ENABLE_ADDGRP_KILL=true|" \
        -e "s|^mailer .*|mailer                 /bin/true|" \
        -e "s|^reporting_params .*|reporting_params       accounting=true reporting=false flush_time=00:00:01 accounting_flush_time=00:00:00 joblog=false sharelog=00:00:00|" \
        /usr/share/gridengine/default-configuration >"$SGE_SPOOL/global"
    (
        sge_env
        /usr/lib/gridengine/spoolinit berkeleydb libspoolb "$SGE_SPOOL/spooldb" init
        /usr/lib/gridengine/spooldefaults configuration "$SGE_SPOOL/global"
        /usr/lib/gridengine/spooldefaults complexes /usr/share/gridengine/util/resources/centry
        /usr/lib/gridengine/spooldefaults usersets /usr/share/gridengine/util/resources/usersets
        /usr/lib/gridengine/spooldefaults managers root
    ) >"$SGE_SPOOL/init.log" 2>&1 || { show_log "$SGE_SPOOL/init.log"; die "Grid Engine's spool could not be made"; }
}

sge_conf() {  # sge_conf N SLOTS: hosts, the consumable, the parallel environments, the queue
    # (called in a || list, where set -e does not apply: each step returns on failure itself)
    local n=$1 slots=$2 k hosts="" f=$SGE_SPOOL/conf
    mkdir -p "$f"
    for k in $(seq 1 "$n"); do hosts="$hosts n$k"; done
    hosts=${hosts# }
    qconf -ah "${hosts// /,}" || return 1                    # the qmaster's own host is one already
    qconf -as "boxctl,${hosts// /,}" || return 1
    # the scheduler looks every second (default 15 s), and again as soon as a job comes or goes
    qconf -ssconf | sed -e "s|^schedule_interval .*|schedule_interval                 0:0:1|" \
        -e "s|^flush_submit_sec .*|flush_submit_sec                  1|" \
        -e "s|^flush_finish_sec .*|flush_finish_sec                  1|" >"$f/sched"
    qconf -Msconf "$f/sched" || return 1
    # JOB: a job takes one, whatever its slots (YES would take one per slot)
    { qconf -sc; echo "box box INT <= YES JOB 0 0"; } | grep -v '^#' >"$f/complexes"
    qconf -Mc "$f/complexes" || return 1
    qconf -mattr exechost complex_values box=1 global || return 1
    local pe rule
    for pe in mpi mpi-fill; do
        rule=1; [ "$pe" = mpi-fill ] && rule='$fill_up'
        cat >"$f/$pe" <<EOF
pe_name            $pe
slots              9999
user_lists         NONE
xuser_lists        NONE
start_proc_args    NONE
stop_proc_args     NONE
allocation_rule    $rule
control_slaves     TRUE
job_is_first_task  FALSE
urgency_slots      min
accounting_summary FALSE
qsort_args         NONE
EOF
        qconf -Ap "$f/$pe" || return 1
    done
    # notify: SIGUSR2 (before a kill) and SIGUSR1 (before a suspend) this long ahead, for -notify
    cat >"$f/box.q" <<EOF
qname                 box.q
hostlist              $hosts
seq_no                0
load_thresholds       NONE
suspend_thresholds    NONE
nsuspend              1
suspend_interval      00:05:00
priority              0
min_cpu_interval      00:05:00
processors            UNDEFINED
qtype                 BATCH INTERACTIVE
ckpt_list             NONE
pe_list               mpi mpi-fill
rerun                 FALSE
slots                 $slots
tmpdir                /tmp
shell                 /bin/bash
prolog                NONE
epilog                NONE
shell_start_mode      unix_behavior
starter_method        NONE
suspend_method        NONE
resume_method         NONE
terminate_method      NONE
notify                00:00:10
owner_list            NONE
user_lists            NONE
xuser_lists           NONE
subordinate_list      NONE
complex_values        NONE
projects              NONE
xprojects             NONE
calendar              NONE
initial_state         default
s_rt                  INFINITY
h_rt                  INFINITY
s_cpu                 INFINITY
h_cpu                 INFINITY
s_fsize               INFINITY
h_fsize               INFINITY
s_data                INFINITY
h_data                INFINITY
s_stack               INFINITY
h_stack               INFINITY
s_core                INFINITY
h_core                INFINITY
s_rss                 INFINITY
h_rss                 INFINITY
s_vmem                INFINITY
h_vmem                INFINITY
EOF
    qconf -Aq "$f/box.q" || return 1
}

sge_start_execd() {  # sge_start_execd I: node nI's execd inside its namespace and cgroup
    local k=$1
    mkdir -p "$SGE_SPOOL/execd/n$k"
    nsenter --net="/var/run/netns/$PREFIX$k" unshare --uts sh -c \
        "echo \$\$ >'$(cg_dir "n$k")/cgroup.procs' && hostname n$k && exec /usr/lib/gridengine/sge_execd" \
        || die "sge_execd on n$k did not start"
}

sge_nodes_up() {  # sge_nodes_up N: every node's execd reports a load
    [ "$(qhost 2>/dev/null | awk 'NR > 3 && $4 != "-" {n++} END {print n + 0}')" -ge "$1" ]
}

sge_up() {  # sge_up N SLOTS
    local n=$1 slots=$2 k
    sge_ensure_packages
    sge_env
    sge_hosts_up "$n"
    sge_cell
    : >"$SGE_SPOOL/qmaster.log"
    /usr/lib/gridengine/sge_qmaster || { show_log "$SGE_SPOOL/qmaster/messages"; die "sge_qmaster did not start"; }
    wait_for 20 sh -c 'qconf -sh >/dev/null 2>&1' || { show_log "$SGE_SPOOL/qmaster/messages"; die "sge_qmaster does not answer"; }
    sge_conf "$n" "$slots" >"$SGE_SPOOL/conf.log" 2>&1 || { show_log "$SGE_SPOOL/conf.log"; die "Grid Engine's configuration failed"; }
    for k in $(seq 1 "$n"); do sge_start_execd "$k"; done
    if ! wait_for 60 sge_nodes_up "$n"; then
        qhost >&2 || true
        show_log "$SGE_SPOOL/qmaster/messages"
        die "not every Grid Engine execd reported within 60 s"
    fi
}

sge_down() {  # the qmaster stopped (the execds die with their namespaces), the cell and names gone
    [ -d "$SGE_SPOOL" ] || [ -d "$SGE_ROOT_DIR/$SGE_CELL_NAME" ] || { sge_hosts_down; return 0; }
    local p
    p="$(sge_qmaster_pid)"
    if alive "$p"; then
        # jobs first, so that none of their processes outlives its execd
        (sge_env; timeout 10 qdel -f -u '*' >/dev/null 2>&1 || true)
        kill -TERM "$p" 2>/dev/null || true
        # a qmaster that lingers keeps its port: the next one could not bind it
        wait_for 20 all_gone "$p" || { kill -KILL "$p" 2>/dev/null || true; wait_for 5 all_gone "$p" || true; }
    fi
    rm -rf "${SGE_SPOOL:?}" "$SGE_ROOT_DIR/${SGE_CELL_NAME:?}"
    sge_hosts_down
}
