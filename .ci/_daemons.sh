# Shared by .ci/slurm.sh and .ci/sge.sh (sourced; each sets ME and LOCK first): messages, the
# start/stop lock, and stopping daemons by pid file with a SIGKILL fallback.

die() { echo "$ME: $*" >&2; exit 1; }
say() { echo "$ME: $*"; }
now() { date +%s.%N; }

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
