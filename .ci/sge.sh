#!/usr/bin/env bash
# Start, stop or inspect a real one-node Grid Engine cell (sge_qmaster + sge_execd) for the
# project's tests, without systemd. Debian 12's packages (gridengine-master, gridengine-exec,
# gridengine-client; the README's test command installs them) create the cell 'default' under
# /var/lib/gridengine when they are installed, and their init scripts are not run in a container:
# this script starts the daemons and configures the cell for one machine.
#
#   bash .ci/sge.sh start    # idempotent; root only; installs nothing
#   bash .ci/sge.sh stop     # idempotent; never touches a cell this script did not configure
#   bash .ci/sge.sh status   # qstat -f; exit 0 if the queue instance on this host is up
#
# Logs: the daemons' own, /var/spool/gridengine/qmaster/messages and
# /var/spool/gridengine/execd/*/messages (start prints their tails when it fails).
# Environment: DETOL_SGE_SLOTS (slots of the queue all.q, default 4, so that two worker jobs of
# 2 slots fit at once even on a 2-core machine), DETOL_SGE_TIMEOUT (seconds start waits for the
# queue to come up, default 60).
set -euo pipefail

export SGE_ROOT=/var/lib/gridengine SGE_CELL=default
COMMON=$SGE_ROOT/$SGE_CELL/common
MARK=$COMMON/detol-sge                    # present: this script configured the cell
SPOOL=/var/spool/gridengine
QMASTER_PID=$SPOOL/qmaster/qmaster.pid    # written by sge_qmaster itself
EXECD_PID=/run/gridengine/execd.pid       # SGE_EXECD_PIDFILE
QMASTER_LOG=$SPOOL/qmaster/messages
QUEUE=all.q
PE=smp
SLOTS=${DETOL_SGE_SLOTS:-4}
TIMEOUT=${DETOL_SGE_TIMEOUT:-60}
NODE=$(hostname)
LOCK=/run/detol-sge.lock  # start and stop run one at a time (tests may call start in parallel)
UTIL=/usr/lib/gridengine

ME=sge.sh
. "$(dirname "${BASH_SOURCE[0]}")/_daemons.sh"
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}'; }


kill_shepherds() {  # what runs a job; the jobs' own processes share its process group
    local pid
    for pid in $(pgrep -x sge_shepherd 2>/dev/null || true); do
        kill -KILL -- "-$pid" "$pid" 2>/dev/null || true
    done
}

show_logs() {
    local f
    for f in "$QMASTER_LOG" "$SPOOL"/execd/*/messages; do
        [ -f "$f" ] || continue
        echo "----- tail $f" >&2
        tail -n 15 "$f" >&2 2>/dev/null || true
    done
}

qmaster_answers() { timeout 10 qstat -f >/dev/null 2>&1; }

# The queue instance on this host: its states column ('' when healthy; u = execd unheard,
# E = error, d = disabled, a = alarm...). Fails when qstat does not list it.
queue_states() {
    local line
    line=$(timeout 10 qstat -f -q "$QUEUE" 2>/dev/null | grep "^$QUEUE@" | head -n 1) || return 1
    [ -n "$line" ] || return 1
    awk '{print $6}' <<<"$line"
}

ensure_packages() {
    local p
    for p in sge_qmaster sge_execd; do
        [ -x "/usr/sbin/$p" ] ||
            die "/usr/sbin/$p not found: install Grid Engine first (apt-get install" \
                "gridengine-master gridengine-exec gridengine-client; the README's test command" \
                "does)"
    done
    command -v qconf >/dev/null 2>&1 || die "qconf not found (apt-get install gridengine-client)"
    [ -f "$COMMON/bootstrap" ] ||
        die "$COMMON/bootstrap missing: the packages did not create the cell '$SGE_CELL'" \
            "(reinstall gridengine-master with debconf's shared/gridengineconfig = true)"
}

# Grid Engine refuses a client whose address resolves to another name than the one it gives
# (here 127.0.0.1 resolves to 'localhost', the host calls itself '$NODE'): host_aliases makes
# them one host.
ensure_hostname() {
    local addr back
    if ! getent hosts "$NODE" >/dev/null 2>&1; then
        echo "127.0.0.1 $NODE" >>/etc/hosts
        say "added '127.0.0.1 $NODE' to /etc/hosts"
    fi
    echo "$NODE" >"$COMMON/act_qmaster"
    chown sgeadmin:sgeadmin "$COMMON/act_qmaster"
    addr=$(getent hosts "$NODE" | awk '{print $1; exit}')
    back=$("$UTIL/gethostbyaddr" -name "$addr" 2>/dev/null || true)
    if [ -n "$back" ] && [ "$back" != "$NODE" ]; then
        echo "$NODE $back" >"$COMMON/host_aliases"
    else
        rm -f "$COMMON/host_aliases"
    fi
}

start_qmaster() {
    local i
    running_pid "$QMASTER_PID" sge_qmaster >/dev/null && return 0
    mkdir -p /run/gridengine "$SPOOL/qmaster"
    chown sgeadmin:sgeadmin /run/gridengine "$SPOOL/qmaster"
    rm -f "$QMASTER_PID"
    /usr/sbin/sge_qmaster 9>&- || { show_logs; die "sge_qmaster failed to start"; }
    for i in $(seq 1 $((TIMEOUT * 2))); do
        qmaster_answers && return 0
        running_pid "$QMASTER_PID" sge_qmaster >/dev/null || [ "$i" -lt 10 ] ||
            { show_logs; die "sge_qmaster exited after starting"; }
        sleep 0.5
    done
    show_logs
    die "sge_qmaster does not answer qstat after ${TIMEOUT} s"
}

qc() {  # qconf, quiet unless it fails
    local out
    out=$(qconf "$@" 2>&1) || die "qconf $* failed: $out"
}

# Replaces the lines 'key value' of a qconf listing: edit <file> key value [key value...].
edit() {
    local file=$1 tmp
    shift
    tmp=$(mktemp)
    awk -v kv="$*" 'BEGIN { n = split(kv, a, " "); for (i = 1; i < n; i += 2) set[a[i]] = a[i + 1] }
        /^[ \t]/ && skip { next }
        { skip = 0 }
        ($1 in set) { print $1, set[$1]; skip = ($0 ~ /\\$/); next }
        { print }' "$file" >"$tmp"
    mv -f "$tmp" "$file"
}

GLOBAL_CHANGED=0  # configure changed the global configuration: a running execd must restart

configure() {
    local dir
    dir=$(mktemp -d)
    # Jobs run as root here (uid/gid 0; Grid Engine's default minimum is 1000). Kill every process
    # of a job when it ends, not just its process group (ranks, a worker's children).
    qconf -sconf global >"$dir/global"
    cp "$dir/global" "$dir/before"
    edit "$dir/global" min_uid 0 min_gid 0 execd_params ENABLE_ADDGRP_KILL=true
    if ! cmp -s <(awk '{$1 = $1} 1' "$dir/global") <(awk '{$1 = $1} 1' "$dir/before"); then
        qc -Mconf "$dir/global"
        GLOBAL_CHANGED=1
    fi
    # Dispatch within a second of a submission (the default scheduling interval is 15 s).
    qconf -ssconf >"$dir/sched"
    edit "$dir/sched" schedule_interval 0:0:1 flush_submit_sec 1 flush_finish_sec 1 \
        job_load_adjustments NONE
    qc -Msconf "$dir/sched"
    qconf -sh 2>/dev/null | grep -qx "$NODE" || qc -ah "$NODE"
    qconf -ss 2>/dev/null | grep -qx "$NODE" || qc -as "$NODE"
    # A parallel environment whose slots are all on the job's one host: a worker job asks
    # '-pe smp N' for its trials' N ranks.
    cat >"$dir/pe" <<EOF
pe_name            $PE
slots              9999
user_lists         NONE
xuser_lists        NONE
start_proc_args    NONE
stop_proc_args     NONE
allocation_rule    \$pe_slots
control_slaves     TRUE
job_is_first_task  TRUE
urgency_slots      min
accounting_summary FALSE
qsort_args         NONE
EOF
    if qconf -sp "$PE" >/dev/null 2>&1; then
        qc -Mp "$dir/pe"
    else
        qc -Ap "$dir/pe"
    fi
    # The machine is shared and loaded: no load threshold puts the queue into alarm.
    if qconf -sq "$QUEUE" >"$dir/queue" 2>/dev/null; then
        edit "$dir/queue" hostlist "$NODE" load_thresholds NONE pe_list "$PE" slots "$SLOTS" \
            shell /bin/bash
        qc -Mq "$dir/queue"
    else
        qconf -sq >"$dir/queue"
        edit "$dir/queue" qname "$QUEUE" hostlist "$NODE" load_thresholds NONE pe_list "$PE" \
            slots "$SLOTS" shell /bin/bash
        qc -Aq "$dir/queue"
    fi
    rm -rf "$dir"
}

start_execd() {
    local restart=$1
    if [ "$restart" = 1 ] && running_pid "$EXECD_PID" sge_execd >/dev/null; then
        say "the global configuration changed; restarting sge_execd"
        stop_daemons "$EXECD_PID:sge_execd"
    fi
    running_pid "$EXECD_PID" sge_execd >/dev/null && return 0
    mkdir -p /run/gridengine "$SPOOL/execd"
    chown sgeadmin:sgeadmin /run/gridengine "$SPOOL/execd"
    rm -f "$EXECD_PID"
    SGE_EXECD_PIDFILE=$EXECD_PID /usr/sbin/sge_execd 9>&- ||
        { show_logs; die "sge_execd failed to start"; }
}

wait_queue() {
    local deadline st cleared=0 i=0
    deadline=$(awk -v t="$(now)" -v d="$TIMEOUT" 'BEGIN {printf "%.3f", t + d}')
    while :; do
        if st=$(queue_states); then
            [ -z "$st" ] && return 0
            if [[ $st == *E* || $st == *d* ]] && [ "$cleared" = 0 ]; then
                qmod -cq "$QUEUE" >/dev/null 2>&1 || true   # an error left by an earlier job
                qmod -e "$QUEUE" >/dev/null 2>&1 || true
                cleared=1
            fi
        fi
        i=$((i + 1))  # the daemon writes its pid file a moment after it forked
        running_pid "$EXECD_PID" sge_execd >/dev/null || [ "$i" -lt 20 ] ||
            { show_logs; die "sge_execd exited while waiting for $QUEUE@$NODE"; }
        if awk -v t="$(now)" -v d="$deadline" 'BEGIN {exit !(t > d)}'; then
            show_logs
            timeout 10 qstat -f >&2 || true
            die "$QUEUE@$NODE not up after ${TIMEOUT} s (states: ${st:-not listed})"
        fi
        sleep 0.5
    done
}

cmd_start() {
    local t0 st
    t0=$(now)
    [ "$(id -u)" = 0 ] || die "start must run as root"
    ensure_packages
    lock
    if [ ! -f "$MARK" ] && qmaster_answers; then
        say "a Grid Engine not configured by this script is running; left alone"
        timeout 15 qstat -f || true
        exit 0
    fi
    if [ -f "$MARK" ] && [ "$(cat "$MARK")" = "$NODE $SLOTS" ] &&
       running_pid "$EXECD_PID" sge_execd >/dev/null && st=$(queue_states) && [ -z "$st" ]; then
        echo "sge: already running: $QUEUE@$NODE, $SLOTS slots, pe $PE ($(since "$t0") s)"
        exit 0
    fi
    ensure_hostname
    start_qmaster
    configure
    echo "$NODE $SLOTS" >"$MARK"
    start_execd "$GLOBAL_CHANGED"
    wait_queue
    echo "sge: $QUEUE@$NODE up, $SLOTS slots, pe $PE ($(since "$t0") s)"
}

cmd_stop() {
    local i
    if [ ! -f "$MARK" ]; then
        say "the cell was not configured by this script (no $MARK); left it alone"
        return 0
    fi
    [ "$(id -u)" = 0 ] || die "stop must run as root"
    lock
    if running_pid "$QMASTER_PID" sge_qmaster >/dev/null; then
        timeout 15 qdel -f -u '*' >/dev/null 2>&1 || true
        for i in $(seq 1 50); do  # up to 10 s for the execd to end them
            [ -z "$(timeout 5 qstat -u '*' 2>/dev/null || echo x)" ] && break
            sleep 0.2
        done
    fi
    stop_daemons "$EXECD_PID:sge_execd"
    kill_shepherds
    stop_daemons "$QMASTER_PID:sge_qmaster"
    say "stopped"
}

cmd_status() {
    local st
    command -v qstat >/dev/null 2>&1 || die "qstat not installed"
    running_pid "$QMASTER_PID" sge_qmaster >/dev/null ||
        die "sge_qmaster is not running (start it with: bash .ci/sge.sh start)"
    timeout 10 qstat -f || die "qstat failed: the qmaster does not answer"
    st=$(queue_states) || die "no queue instance $QUEUE@$NODE"
    [ -z "$st" ] || die "$QUEUE@$NODE is not up (states: $st)"
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *) echo "usage: bash .ci/sge.sh start|stop|status" >&2; exit 2 ;;
esac
