#!/usr/bin/env bash
# Start, stop or inspect a real multi-node SLURM cluster on this one machine, for the project's
# multi-node tests and benchmarks: each node is a Linux network namespace with its own hostname
# (a persistent UTS namespace), its own address on a bridge (through a veth pair) and its own
# slurmd; the filesystem is shared, as nodes share NFS or BeeGFS. This machine is the login node:
# it holds the bridge's first address, slurmctld and the driver.
#
#   bash .ci/nodes.sh start    # idempotent; root only; installs the Debian packages if missing
#   bash .ci/nodes.sh stop     # idempotent; kills every process left in the nodes, removes them
#   bash .ci/nodes.sh status   # sinfo + squeue of this cluster; exit 0 if every node is up
#   bash .ci/nodes.sh env      # the lines a client needs: export SLURM_CONF=...
#
# Faults, for the multi-node tests and benchmarks/node_faults.py (NODE: detol-n1, ...):
#   crash NODE        SIGKILL every process in the node (slurmd, jobs, ranks): a power cut
#   freeze NODE       SIGSTOP every process in the node (a stuck kernel or filesystem) ...
#   thaw NODE         ... and SIGCONT them again
#   link NODE down|up the node's cable: its veth's host end down or up
#   cut NODE          one-way partition: the node receives nothing from the login node (an
#                     nftables rule inside the node; it can still send) ...
#   uncut NODE        ... and the rule removed
#   ctld-crash        SIGKILL slurmctld; ctld-start starts it again (state from StateSaveLocation)
#   heal NODE         every fault of NODE undone, slurmd started if it is not running, the node
#                     resumed in SLURM and waited for (idle or allocated) within the timeout
#
# The addresses (a private /24 that exists only between these namespaces and the bridge; no
# route leads anywhere else) and names:
#   login    detol-login  10.213.0.1    (the bridge dtlbr0, this machine's own namespace)
#   node i   detol-nI     10.213.0.1I   (namespace detol-nI, veth dtlvI <-> eth0 inside)
# SLURM: its own slurm.conf ($CONF; clients find it through SLURM_CONF), slurmctld on port 6827
# (the one-node SLURM of .ci/slurm.sh keeps 6817 and /etc/slurm/slurm.conf: both can run at
# once), partition 'nodes'. Per node, with '%n' in the paths: spool /var/spool/detol-nodes/%n,
# pid /run/detol-nodes/slurmd-%n.pid, log /var/log/detol-nodes/slurmd-%n.log.
#
# Environment: DETOL_NODES (how many nodes, default 3), DETOL_NODES_CPUS (CPUs each node
# advertises, default 2), DETOL_NODES_TIMEOUT (seconds start waits for the nodes, default 60).
set -euo pipefail

N=${DETOL_NODES:-3}
CPUS=${DETOL_NODES_CPUS:-2}
TIMEOUT=${DETOL_NODES_TIMEOUT:-60}
# SLURM marks a node that stops answering DOWN (and kills its jobs everywhere) after this many
# seconds; Debian's default is 300. Here 10: the bound on noticing a crashed or frozen node.
SLURMD_TIMEOUT=${DETOL_NODES_SLURMD_TIMEOUT:-10}
NET=10.213.0
BRIDGE=dtlbr0
LOGIN=detol-login
RUN=/run/detol-nodes
CONF_DIR=/etc/detol-nodes
CONF=$CONF_DIR/slurm.conf
CTLD_PID=$RUN/slurmctld.pid
CTLD_PORT=6827
LOG_DIR=/var/log/detol-nodes
SPOOL=/var/spool/detol-nodes
HOSTS_BEGIN='# detol .ci/nodes.sh begin'
HOSTS_END='# detol .ci/nodes.sh end'
PARTITION=nodes
LOCK=/run/detol-nodes.lock

ME=nodes.sh
. "$(dirname "${BASH_SOURCE[0]}")/_daemons.sh"
since() { awk -v a="$1" -v b="$(now)" 'BEGIN {printf "%.1f", b - a}'; }

node_name() { echo "detol-n$1"; }
node_addr() { echo "$NET.$((10 + $1))"; }
# The nodes that exist now (namespaces this script made), whatever DETOL_NODES says now.
existing_nodes() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^detol-n[0-9]+$' | sort -V || true; } 
uts_file() { echo "$RUN/uts/$1"; }

# Runs a command on a node: in its network and UTS namespaces (the rest is shared).
on_node() {  # name cmd...
    local name=$1; shift
    nsenter --net="/run/netns/$name" --uts="$(uts_file "$name")" -- "$@"
}

desired_conf() {
    local i mem_mb
    mem_mb=$(awk '/^MemTotal:/ {printf "%d", $2 / 1024 * 0.8 / '"$N"'}' /proc/meminfo)
    cat <<EOF
# written by detol .ci/nodes.sh: a $N-node SLURM in network namespaces for detol's multi-node
# tests; 'bash .ci/nodes.sh stop' stops it and removes the nodes. Edit the script, not this file.
ClusterName=detolnodes
SlurmctldHost=$LOGIN($NET.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=6818
SlurmUser=root
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
JobRequeue=0
StateSaveLocation=$SPOOL/ctld
SlurmdSpoolDir=$SPOOL/%n
SlurmctldPidFile=$CTLD_PID
SlurmdPidFile=$RUN/slurmd-%n.pid
SlurmctldLogFile=$LOG_DIR/slurmctld.log
SlurmdLogFile=$LOG_DIR/slurmd-%n.log
SlurmctldDebug=info
SlurmdDebug=info
SlurmctldTimeout=30
SlurmdTimeout=$SLURMD_TIMEOUT
MessageTimeout=10
InactiveLimit=0
KillWait=5
MinJobAge=5
Waittime=0
EOF
    for i in $(seq 1 "$N"); do
        echo "NodeName=$(node_name "$i") NodeHostname=$(node_name "$i") NodeAddr=$(node_addr "$i") CPUs=$CPUS RealMemory=$mem_mb State=UNKNOWN"
    done
    echo "PartitionName=$PARTITION Nodes=ALL Default=YES MaxTime=INFINITE State=UP"
}

ensure_packages() {
    local p missing=0
    for p in slurmctld slurmd sinfo munged nsenter ip; do have "$p" || missing=1; done
    [ "$missing" = 0 ] && return 0
    say "installing slurmctld slurmd slurm-client munge iproute2 util-linux"
    apt-get update -qq || die "apt-get update failed"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq slurmctld slurmd slurm-client munge \
        iproute2 util-linux >/dev/null || die "apt-get install failed"
}

without_our_hosts() {
    awk -v b="$HOSTS_BEGIN" -v e="$HOSTS_END" '$0 == b {skip = 1} !skip {print} $0 == e {skip = 0}' /etc/hosts
}

# /etc/hosts: every node's name (and the login node's) for every process, inside or out.
write_hosts() {
    local i tmp
    tmp=$(mktemp /etc/.hosts.detol.XXXXXX)
    without_our_hosts >"$tmp"
    {
        echo "$HOSTS_BEGIN"
        echo "$NET.1 $LOGIN"
        for i in $(seq 1 "$N"); do echo "$(node_addr "$i") $(node_name "$i")"; done
        echo "$HOSTS_END"
    } >>"$tmp"
    chmod 0644 "$tmp"
    cat "$tmp" >/etc/hosts  # in place: /etc/hosts may be a bind mount
    rm -f "$tmp"
}

remove_hosts() {
    local tmp
    grep -qx "$HOSTS_BEGIN" /etc/hosts 2>/dev/null || return 0
    tmp=$(mktemp /etc/.hosts.detol.XXXXXX)
    without_our_hosts >"$tmp"
    cat "$tmp" >/etc/hosts
    rm -f "$tmp"
}

make_network() {
    local i name veth uts
    if ! ip link show "$BRIDGE" >/dev/null 2>&1; then
        ip link add "$BRIDGE" type bridge
    fi
    ip addr replace "$NET.1/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    mkdir -p "$RUN/uts"
    uts=$(uts_file "$LOGIN")  # slurmctld wants to run on a host named as SlurmctldHost
    if ! mountpoint -q "$uts" 2>/dev/null; then
        touch "$uts"
        unshare --uts="$uts" hostname "$LOGIN"
    fi
    for i in $(seq 1 "$N"); do
        name=$(node_name "$i"); veth=dtlv$i; uts=$(uts_file "$name")
        [ -e "/run/netns/$name" ] || ip netns add "$name"
        if ! ip link show "$veth" >/dev/null 2>&1; then
            ip link add "$veth" type veth peer name eth0 netns "$name"
        fi
        ip link set "$veth" master "$BRIDGE"
        ip link set "$veth" up
        ip -n "$name" link set lo up
        ip -n "$name" addr replace "$(node_addr "$i")/24" dev eth0
        ip -n "$name" link set eth0 up
        if ! mountpoint -q "$uts" 2>/dev/null; then
            touch "$uts"
            unshare --uts="$uts" hostname "$name"
        fi
    done
}

remove_network() {
    local name uts
    umount "$(uts_file "$LOGIN")" 2>/dev/null || true
    for name in $(existing_nodes); do
        ip netns del "$name" 2>/dev/null || true  # takes its end of the veth with it
        uts=$(uts_file "$name")
        umount "$uts" 2>/dev/null || true
        rm -f "$uts"
    done
    ip link del "$BRIDGE" 2>/dev/null || true
}

write_conf() {
    local tmp
    mkdir -p "$CONF_DIR"
    tmp=$(mktemp "$CONF_DIR/.slurm.conf.XXXXXX")
    desired_conf >"$tmp"
    chmod 0644 "$tmp"
    if [ -f "$CONF" ] && cmp -s "$tmp" "$CONF"; then rm -f "$tmp"; else mv -f "$tmp" "$CONF"; fi
}

show_logs() {
    local f
    for f in "$LOG_DIR"/*.log; do
        [ -f "$f" ] || continue
        echo "----- tail $f" >&2
        tail -n 15 "$f" >&2 || true
    done
}

slurmd_pid() { running_pid "$RUN/slurmd-$1.pid" slurmd; }

start_ctld() {
    mkdir -p "$SPOOL/ctld" "$LOG_DIR"
    running_pid "$CTLD_PID" slurmctld >/dev/null && return 0
    rm -f "$CTLD_PID"
    SLURM_CONF=$CONF nsenter --uts="$(uts_file "$LOGIN")" -- /usr/sbin/slurmctld -f "$CONF" 9>&- ||
        { show_logs; die "slurmctld failed to start"; }
}

start_daemons() {
    local i name
    start_ctld
    for i in $(seq 1 "$N"); do
        name=$(node_name "$i")
        mkdir -p "$SPOOL/$name"
        slurmd_pid "$name" >/dev/null && continue
        rm -f "$RUN/slurmd-$name.pid"
        SLURM_CONF=$CONF on_node "$name" /usr/sbin/slurmd -f "$CONF" -N "$name" 9>&- ||
            { show_logs; die "slurmd on $name failed to start"; }
    done
}

ctl() { SLURM_CONF=$CONF timeout 10 "$@"; }

wait_idle() {
    local deadline st up i resumed=0
    deadline=$(awk -v t="$(now)" -v d="$TIMEOUT" 'BEGIN {printf "%.3f", t + d}')
    while :; do
        up=0
        for i in $(seq 1 "$N"); do
            st=$(ctl sinfo -h -n "$(node_name "$i")" -o %t 2>/dev/null | head -n 1 || true)
            case "$st" in
                idle|mix|alloc) up=$((up + 1)) ;;
                down*|drain*|drng|fail*)
                    [ "$resumed" = 1 ] ||
                        ctl scontrol update nodename="$(node_name "$i")" state=resume >/dev/null 2>&1 || true ;;
            esac
        done
        [ "$up" = "$N" ] && return 0
        resumed=1
        running_pid "$CTLD_PID" slurmctld >/dev/null || { show_logs; die "slurmctld exited"; }
        if awk -v t="$(now)" -v d="$deadline" 'BEGIN {exit !(t > d)}'; then
            show_logs; ctl sinfo -N >&2 || true
            die "$up of $N nodes up after ${TIMEOUT} s"
        fi
        sleep 0.5
    done
}

cmd_start() {
    local t0 name
    t0=$(now)
    [ "$(id -u)" = 0 ] || die "start must run as root"
    lock
    ensure_packages
    ensure_munge
    make_network
    write_hosts
    write_conf
    if [ -f "$RUN/conf.sha256" ] && [ "$(cat "$RUN/conf.sha256")" != "$(sha256sum "$CONF" | cut -d' ' -f1)" ]; then
        say "$CONF changed since the daemons started; restarting them"
        for name in $(existing_nodes); do stop_daemons "$RUN/slurmd-$name.pid:slurmd"; done
        stop_daemons "$CTLD_PID:slurmctld"
    fi
    start_daemons
    sha256sum "$CONF" | cut -d' ' -f1 >"$RUN/conf.sha256"
    wait_idle
    echo "nodes: $N nodes up ($(existing_nodes | tr '\n' ' ')), $CPUS CPUs each, partition" \
         "$PARTITION, SLURM_CONF=$CONF ($(since "$t0") s)"
}

# Every process whose network namespace is one of the nodes': what a crashed cluster leaves.
node_pids() { local name; for name in $(existing_nodes); do ip netns pids "$name" 2>/dev/null || true; done; }

cmd_stop() {
    local i pids name
    [ "$(id -u)" = 0 ] || die "stop must run as root"
    lock
    if running_pid "$CTLD_PID" slurmctld >/dev/null; then
        ctl scancel --full --quiet -u root 2>/dev/null || true
        for i in $(seq 1 50); do  # SIGTERM, then SIGKILL after KillWait=5 s: up to 10 s
            [ -n "$(ctl squeue -h -o %i 2>/dev/null || echo x)" ] || break
            sleep 0.2
        done
    fi
    for name in $(existing_nodes); do
        stop_daemons "$RUN/slurmd-$name.pid:slurmd"
    done
    pids=$(node_pids | tr '\n' ' ')
    # shellcheck disable=SC2086  # one argument per pid
    [ -z "${pids// /}" ] || { say "killing what was left on the nodes: $pids"; kill -KILL $pids 2>/dev/null || true; }
    stop_daemons "$CTLD_PID:slurmctld"
    remove_network
    remove_hosts
    rm -rf "$SPOOL" "$RUN"
    stop_munged_if_unused
    say "stopped"
}

cmd_status() {
    local st rc=0 name
    [ -f "$CONF" ] || die "not started (no $CONF)"
    running_pid "$CTLD_PID" slurmctld >/dev/null || die "slurmctld is not running (bash .ci/nodes.sh start)"
    ctl sinfo -N || die "sinfo failed"
    ctl squeue || true
    for name in $(existing_nodes); do
        st=$(ctl sinfo -h -n "$name" -o %t 2>/dev/null | head -n 1 || true)
        [[ $st =~ ^(idle|mix|alloc|comp)$ ]] || rc=1
    done
    return "$rc"
}

# --- faults -------------------------------------------------------------------------------------

check_node() {  # name
    [[ ${1:-} =~ ^detol-n[0-9]+$ ]] || die "expected a node name like detol-n1, got '${1:-}'"
    [ -e "/run/netns/$1" ] || die "no node $1 (bash .ci/nodes.sh start)"
}

signal_node() {  # name signal: every process in the node's network namespace
    local pids
    pids=$(ip netns pids "$1" | tr '\n' ' ')
    # shellcheck disable=SC2086  # one argument per pid
    [ -z "${pids// /}" ] || kill "-$2" $pids 2>/dev/null || true
    echo "$1: SIG$2 to $(wc -w <<<"$pids") processes"
}

veth_of() { echo "dtlv${1#detol-n}"; }

cut_node() {
    ip netns exec "$1" nft -f - <<EOF
table inet detol_cut
delete table inet detol_cut
table inet detol_cut {
    chain input { type filter hook input priority 0; policy accept; ip saddr $NET.1 drop; }
}
EOF
    echo "$1: receives nothing from $NET.1 ($LOGIN)"
}

uncut_node() {
    ip netns exec "$1" nft delete table inet detol_cut 2>/dev/null || true
    echo "$1: partition removed"
}

heal_node() {
    local name=$1 st deadline
    signal_node "$name" CONT >/dev/null
    ip link set "$(veth_of "$name")" up
    uncut_node "$name" >/dev/null
    start_ctld
    if ! slurmd_pid "$name" >/dev/null; then
        rm -f "$RUN/slurmd-$name.pid"
        SLURM_CONF=$CONF on_node "$name" /usr/sbin/slurmd -f "$CONF" -N "$name" 9>&- ||
            die "slurmd on $name failed to start"
    fi
    deadline=$(awk -v t="$(now)" -v d="$TIMEOUT" 'BEGIN {printf "%.3f", t + d}')
    while :; do
        st=$(ctl sinfo -h -n "$name" -o %t 2>/dev/null | head -n 1 || true)
        case "$st" in
            idle|mix|alloc) echo "$name: healed ($st)"; return 0 ;;
            down*|drain*|fail*) ctl scontrol update nodename="$name" state=resume >/dev/null 2>&1 || true ;;
        esac
        if awk -v t="$(now)" -v d="$deadline" 'BEGIN {exit !(t > d)}'; then
            die "$name not back after ${TIMEOUT} s (state: ${st:-none})"
        fi
        sleep 0.5
    done
}

case "${1:-}" in
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    env) echo "export SLURM_CONF=$CONF" ;;
    crash) check_node "${2:-}"; signal_node "$2" KILL ;;
    freeze) check_node "${2:-}"; signal_node "$2" STOP ;;
    thaw) check_node "${2:-}"; signal_node "$2" CONT ;;
    link)
        check_node "${2:-}"
        [[ ${3:-} =~ ^(up|down)$ ]] || die "usage: link NODE up|down"
        ip link set "$(veth_of "$2")" "$3"; echo "$2: link $3" ;;
    cut) check_node "${2:-}"; cut_node "$2" ;;
    uncut) check_node "${2:-}"; uncut_node "$2" ;;
    ctld-crash)
        pid=$(running_pid "$CTLD_PID" slurmctld) || die "slurmctld is not running"
        kill -KILL "$pid"; echo "slurmctld (pid $pid): SIGKILL" ;;
    ctld-start) start_ctld; echo "slurmctld: running" ;;
    heal) check_node "${2:-}"; heal_node "$2" ;;
    *) echo "usage: bash .ci/nodes.sh start|stop|status|env|crash|freeze|thaw|link|cut|uncut|ctld-crash|ctld-start|heal" >&2
       exit 2 ;;
esac

