# Shared by .ci/slurm.sh and .ci/sge.sh (sourced; each sets ME and LOCK first): messages, the
# start/stop lock, and stopping daemons by pid file with a SIGKILL fallback.

die() { echo "$ME: $*" >&2; exit 1; }
say() { echo "$ME: $*"; }
now() { date +%s.%N; }
have() { command -v "$1" >/dev/null 2>&1 || [ -x "/usr/sbin/$1" ]; }

lock() {
    exec 9>"$LOCK"
    flock -w 180 9 || die "another '$ME start/stop' has held $LOCK for 180 s"
}

# Alive and not a zombie (a killed daemon stays a zombie until init reaps it).
alive() {  # pid
    local stat
    stat=$(cat "/proc/$1/stat" 2>/dev/null) || return 1
    stat=${stat##*) }
    [ "${stat%% *}" != Z ]
}

# The pid in a pid file, if that process is alive and is the named program.
running_pid() {  # pidfile comm
    local pid
    [ -r "$1" ] || return 1
    pid=$(tr -dc '0-9' <"$1")
    [ -n "$pid" ] && alive "$pid" || return 1
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$2" ] || return 1
    echo "$pid"
}

any_alive() {  # pid...
    local pid
    for pid in "$@"; do alive "$pid" && return 0; done
    return 1
}

# Stops daemons together: SIGTERM, wait up to ~10 s, then SIGKILL (a daemon with a hung job
# may ignore SIGTERM). Arguments: pidfile:comm pairs; pid files are removed.
stop_daemons() {
    local spec pid pids=() names=() i
    for spec in "$@"; do
        if pid=$(running_pid "${spec%%:*}" "${spec##*:}"); then
            kill -TERM "$pid" 2>/dev/null || true
            pids+=("$pid")
            names+=("${spec##*:} (pid $pid)")
        fi
    done
    if [ "${#pids[@]}" -gt 0 ]; then
        for i in $(seq 1 100); do
            any_alive "${pids[@]}" || break
            sleep 0.1
        done
        for i in "${!pids[@]}"; do
            if alive "${pids[$i]}"; then
                say "${names[$i]} ignored SIGTERM for 10 s, sending SIGKILL"
                kill -KILL "${pids[$i]}" 2>/dev/null || true
            fi
        done
        for i in $(seq 1 50); do
            any_alive "${pids[@]}" || break
            sleep 0.1
        done
        say "stopped ${names[*]}"
    fi
    for spec in "$@"; do
        pid=$(running_pid "${spec%%:*}" "${spec##*:}") || rm -f "${spec%%:*}"
    done
}

# munged, shared by the one-node SLURM (.ci/slurm.sh) and the namespace cluster (.ci/nodes.sh):
# whichever script starts it leaves MUNGED_MARK; stop_munged_if_unused stops it only when that
# mark exists and neither SLURM's slurmctld still runs.
MUNGED_PID=/run/munge/munged.pid
MUNGED_MARK=/run/detol-slurm.munged

munge_works() { munge -n 2>/dev/null | unmunge >/dev/null 2>&1; }

ensure_munge() {
    local i
    if [ ! -s /etc/munge/munge.key ]; then
        mkdir -p /etc/munge
        if have mungekey; then
            mungekey --create --keyfile=/etc/munge/munge.key --force >/dev/null 2>&1 ||
                dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
        else
            dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
        fi
    fi
    chown munge:munge /etc/munge /etc/munge/munge.key
    chmod 0700 /etc/munge
    chmod 0400 /etc/munge/munge.key
    mkdir -p /run/munge /var/log/munge /var/lib/munge
    chown munge:munge /run/munge /var/log/munge /var/lib/munge
    chmod 0755 /run/munge
    chmod 0700 /var/log/munge
    chmod 0711 /var/lib/munge
    munge_works && return 0
    if running_pid "$MUNGED_PID" munged >/dev/null; then
        die "munged is running (pid $(cat "$MUNGED_PID")) but 'munge -n | unmunge' fails"
    fi
    rm -f /run/munge/munge.socket.2 /run/munge/munge.socket.2.lock "$MUNGED_PID"
    runuser -u munge -- /usr/sbin/munged 9>&- ||
        die "munged failed to start; see /var/log/munge/munged.log"
    touch "$MUNGED_MARK"
    for i in $(seq 1 40); do
        munge_works && return 0
        sleep 0.25
    done
    die "munged started but 'munge -n | unmunge' still fails; see /var/log/munge/munged.log"
}

stop_munged_if_unused() {
    [ -f "$MUNGED_MARK" ] || return 0
    running_pid /run/slurmctld.pid slurmctld >/dev/null && return 0
    running_pid /run/detol-nodes/slurmctld.pid slurmctld >/dev/null && return 0
    stop_daemons "$MUNGED_PID:munged"
    rm -f "$MUNGED_MARK"
}

# True when process $1 shares this shell's network namespace.
same_netns() {  # pid
    [ "$(readlink "/proc/$1/ns/net" 2>/dev/null)" = "$(readlink /proc/self/ns/net)" ]
}
