#!/usr/bin/env bash
# Start, stop or inspect a real single-node SLURM (slurmctld + slurmd + munged) for the
# project's tests, without systemd.
#
#   bash .ci/slurm.sh start    # idempotent; root only; installs the Debian packages if missing
#   bash .ci/slurm.sh stop     # idempotent; never touches a SLURM this script did not configure
#   bash .ci/slurm.sh status   # sinfo + squeue; exit 0 if the node is up
#
# Environment: DETOL_SLURM_CPUS (CPUs the node advertises, default 4, so that two worker jobs
# of 2 tasks fit at once even on a 2-core machine), DETOL_SLURM_TIMEOUT (seconds start waits
# for the node to become idle, default 60).
set -euo pipefail

MARKER='# written by detol .ci/slurm.sh'
CONF=/etc/slurm/slurm.conf
CTLD_PID=/run/slurmctld.pid
SLURMD_PID=/run/slurmd.pid
CONF_HASH=/run/detol-slurm.conf.sha256   # slurm.conf's hash when the daemons were started
LOG_DIR=/var/log/slurm
CTLD_LOG=$LOG_DIR/slurmctld.log
SLURMD_LOG=$LOG_DIR/slurmd.log
PARTITION=debug
CPUS=${DETOL_SLURM_CPUS:-4}
TIMEOUT=${DETOL_SLURM_TIMEOUT:-60}
NODE=$(hostname -s)
SLURMD_SINCE=  # when start launched slurmd: the node counts only once that slurmd registered
LOCK=/run/detol-slurm.lock  # start and stop run one at a time (tests may call start in parallel)

ME=slurm.sh
. "$(dirname "${BASH_SOURCE[0]}")/_daemons.sh"


# Stop slurmd before slurmctld, not together: a slurmd finishing a job waits for slurmctld to
# hear about it (stop_daemons: .ci/_daemons.sh).

kill_stepds() {
    local pid
    for pid in $(pgrep -x slurmstepd 2>/dev/null || true); do
        same_netns "$pid" || continue  # a node of .ci/nodes.sh: not this SLURM's
        kill -KILL "$pid" 2>/dev/null || true
    done
}

conf_is_ours() { [ -f "$CONF" ] && [ "$(head -n 1 "$CONF")" = "$MARKER" ]; }

# Node states, one a line. With this script's config and no slurmctld running, sinfo would
# retry for ~10 s before failing: don't ask it then.
node_states() {
    if conf_is_ours && ! running_pid "$CTLD_PID" slurmctld >/dev/null; then return 0; fi
    timeout 10 sinfo -h -o %t 2>/dev/null
}
state_is_up() { [[ $1 =~ ^(idle|mix|alloc|comp)$ ]]; }

desired_conf() {
    local mem_kb
    mem_kb=$(awk '/^MemTotal:/ {print $2}' /proc/meminfo)
    cat <<EOF
$MARKER
# A single-node SLURM for detol's tests; 'bash .ci/slurm.sh stop' stops it. Edit the script,
# not this file (start rewrites it). Remove the first line to keep start from touching it.
ClusterName=detol
SlurmctldHost=$NODE
SlurmUser=slurm
SlurmdUser=root
AuthType=auth/munge
CryptoType=crypto/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=500
SlurmdParameters=config_overrides
ReturnToService=2
StateSaveLocation=/var/spool/slurmctld
SlurmdSpoolDir=/var/spool/slurmd
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$SLURMD_PID
SlurmctldLogFile=$CTLD_LOG
SlurmdLogFile=$SLURMD_LOG
SlurmctldDebug=info
SlurmdDebug=info
SlurmctldTimeout=30
SlurmdTimeout=30
MessageTimeout=10
InactiveLimit=0
KillWait=5
MinJobAge=5
Waittime=0
NodeName=$NODE CPUs=$CPUS RealMemory=$((mem_kb * 8 / 10 / 1024)) State=UNKNOWN
PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
}

ensure_packages() {
    local p missing=0
    for p in slurmctld slurmd sinfo munged; do have "$p" || missing=1; done
    [ "$missing" = 0 ] && return 0
    say "installing slurmctld slurmd slurm-client munge"
    apt-get update -qq || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client munge \
        >/dev/null || die "apt-get install slurmctld slurmd slurm-client munge failed"
}

ensure_hostname() {
    getent hosts "$NODE" >/dev/null 2>&1 && return 0
    echo "127.0.0.1 $NODE" >>/etc/hosts
    say "added '127.0.0.1 $NODE' to /etc/hosts"
}

# Writes slurm.conf when it differs from what this script would write; never a foreign one.
write_conf() {
    local tmp
    if [ -f "$CONF" ] && ! conf_is_ours; then
        die "$CONF exists and was not written by this script; not overwriting it"
    fi
    mkdir -p /etc/slurm
    tmp=$(mktemp /etc/slurm/.slurm.conf.XXXXXX)
    desired_conf >"$tmp"
    chmod 0644 "$tmp"
    if [ -f "$CONF" ] && cmp -s "$tmp" "$CONF"; then
        rm -f "$tmp"
    else
        mv -f "$tmp" "$CONF"
    fi
}

ensure_dirs() {
    mkdir -p /var/spool/slurmctld /var/spool/slurmd "$LOG_DIR"
    chown slurm:slurm /var/spool/slurmctld "$LOG_DIR"
    chmod 0755 /var/spool/slurmctld /var/spool/slurmd "$LOG_DIR"
    touch "$CTLD_LOG" "$SLURMD_LOG"
    chown slurm:slurm "$CTLD_LOG"
}

show_logs() {
    local f
    for f in "$CTLD_LOG" "$SLURMD_LOG"; do
        echo "----- tail $f" >&2
        tail -n 25 "$f" >&2 2>/dev/null || true
    done
}

start_daemons() {
    local hash restart=0
    hash=$(sha256sum "$CONF" | cut -d' ' -f1)
    if running_pid "$CTLD_PID" slurmctld >/dev/null || running_pid "$SLURMD_PID" slurmd >/dev/null; then
        if [ "$(cat "$CONF_HASH" 2>/dev/null)" != "$hash" ]; then
            say "$CONF changed since the daemons started; restarting them"
            restart=1
        fi
    fi
    if [ "$restart" = 1 ]; then  # running jobs' slurmstepds survive this, as SLURM intends
        stop_daemons "$SLURMD_PID:slurmd"
        stop_daemons "$CTLD_PID:slurmctld"
    fi
    if ! running_pid "$CTLD_PID" slurmctld >/dev/null; then
        rm -f "$CTLD_PID"
        /usr/sbin/slurmctld -f "$CONF" 9>&- || { show_logs; die "slurmctld failed to start"; }
    fi
    if ! running_pid "$SLURMD_PID" slurmd >/dev/null; then
        rm -f "$SLURMD_PID"
        SLURMD_SINCE=$(date +%Y-%m-%dT%H:%M:%S)
        /usr/sbin/slurmd -f "$CONF" 9>&- || { show_logs; die "slurmd failed to start"; }
    fi
    echo "$hash" >"$CONF_HASH"
}

wait_idle() {
    local deadline st reg resumed=0
    deadline=$(awk -v t="$(now)" -v d="$TIMEOUT" 'BEGIN {printf "%.3f", t + d}')
    while :; do
        st=$(timeout 10 sinfo -h -n "$NODE" -o %t 2>/dev/null | head -n 1 || true)
        # The state saved by a previous slurmctld may say idle before the new slurmd registers.
        reg=$(timeout 10 scontrol -o show node "$NODE" 2>/dev/null |
              grep -o 'SlurmdStartTime=[0-9T:-]*' | cut -d= -f2 || true)
        [[ -z $SLURMD_SINCE || $reg > $SLURMD_SINCE || $reg == "$SLURMD_SINCE" ]] || st="unregistered"
        case "$st" in
            idle|mix|alloc) return 0 ;;
            down|drain|drng|fail|down~|drain~)
                if [ "$resumed" = 0 ]; then
                    scontrol update nodename="$NODE" state=resume >/dev/null 2>&1 || true
                    resumed=1
                fi ;;
        esac
        if ! running_pid "$CTLD_PID" slurmctld >/dev/null; then
            show_logs; die "slurmctld exited while waiting for node $NODE"
        fi
        if ! running_pid "$SLURMD_PID" slurmd >/dev/null; then
            show_logs; die "slurmd exited while waiting for node $NODE"
        fi
        if awk -v t="$(now)" -v d="$deadline" 'BEGIN {exit !(t > d)}'; then
            show_logs
            die "node $NODE not idle after ${TIMEOUT} s (state: ${st:-none})"
        fi
        sleep 0.5
    done
}

cmd_start() {
    local t0 st ncpu
    t0=$(now)
    [ "$(id -u)" = 0 ] || die "start must run as root"
    lock
    # A SLURM that already answers with a usable node: leave it as it is, unless it is ours
    # and its configuration is out of date (e.g. another DETOL_SLURM_CPUS).
    if command -v sinfo >/dev/null 2>&1 && [ -f "$CONF" ]; then
        st=$(node_states | head -n 1 || true)
        if state_is_up "$st"; then
            if ! conf_is_ours; then
                say "a SLURM not configured by this script is running (node state $st); left alone"
                timeout 15 sinfo 2>/dev/null || true
                exit 0
            fi
            if desired_conf | cmp -s - "$CONF" &&
               [ "$(cat "$CONF_HASH" 2>/dev/null)" = "$(sha256sum "$CONF" | cut -d' ' -f1)" ]; then
                ncpu=$(timeout 15 sinfo -h -n "$NODE" -o %c 2>/dev/null | head -n 1 || true)
                echo "slurm: already running: node $NODE $st, ${ncpu:-?} CPUs, partition $PARTITION" \
                     "($(awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}') s)"
                exit 0
            fi
        fi
    fi
    ensure_packages
    if [ -f "$CONF" ] && ! conf_is_ours; then
        die "$CONF exists and was not written by this script; not overwriting it"
    fi
    ensure_hostname
    ensure_munge
    write_conf
    ensure_dirs
    start_daemons
    wait_idle
    st=$(timeout 15 sinfo -h -n "$NODE" -o '%t %c' 2>/dev/null | head -n 1 || true)
    echo "slurm: node $NODE ${st%% *}, ${st##* } CPUs, partition $PARTITION" \
         "($(awk -v a="$t0" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}') s)"
}

cmd_stop() {
    local ids i
    if [ -f "$CONF" ] && ! conf_is_ours; then
        say "$CONF was not written by this script; left that SLURM alone"
        return 0
    fi
    [ "$(id -u)" = 0 ] || die "stop must run as root"
    lock
    if [ -f "$CONF" ] && running_pid "$CTLD_PID" slurmctld >/dev/null; then
        timeout 15 scancel --full --quiet -u root 2>/dev/null || true
        ids=$(timeout 15 squeue -h -o %i 2>/dev/null | tr '\n' ' ' || true)
        # shellcheck disable=SC2086  # one argument per job id
        [ -z "${ids// /}" ] || timeout 15 scancel --quiet $ids 2>/dev/null || true
        # Let SLURM end them (SIGTERM, then SIGKILL after KillWait=5 s): up to 10 s.
        for i in $(seq 1 50); do
            [ -n "$(timeout 5 squeue -h -o %i 2>/dev/null || echo x)" ] || break
            sleep 0.2
        done
    fi
    stop_daemons "$SLURMD_PID:slurmd"
    kill_stepds
    stop_daemons "$CTLD_PID:slurmctld"
    rm -f "$CONF_HASH"
    stop_munged_if_unused
    say "stopped"
}

cmd_status() {
    local st rc=1
    command -v sinfo >/dev/null 2>&1 || die "sinfo not installed"
    if conf_is_ours && ! running_pid "$CTLD_PID" slurmctld >/dev/null; then
        die "slurmctld is not running (start it with: bash .ci/slurm.sh start)"
    fi
    timeout 10 sinfo || die "sinfo failed: no SLURM controller answers"
    timeout 10 squeue || true
    while read -r st; do
        state_is_up "$st" && rc=0
    done < <(node_states || true)
    return "$rc"
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    *) echo "usage: bash .ci/slurm.sh start|stop|status" >&2; exit 2 ;;
esac
