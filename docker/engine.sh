#!/usr/bin/env bash
# A Docker engine for the tests and `make images`, host network only: dockerd with no
# bridge and no iptables rules, so containers run with `--network host` and talk to each
# other and to the tests on loopback, and nothing else is touched on the machine.
#
#   bash docker/engine.sh up      # start dockerd unless an engine answers; wait for it
#   bash docker/engine.sh down    # stop the dockerd this script started (not another one)
#   bash docker/engine.sh status  # exit 0 when an engine answers
#   bash docker/engine.sh install # apt-get install docker.io docker-compose mmdebstrap (root)
#
# Needs root (dockerd). Environment: DLS_ENGINE_DIR (pid file and log; default
# <repo>/.cache/engine), DLS_ENGINE_TIMEOUT (seconds `up` waits, default 60), DOCKER.
# `up` prints one line saying why when the engine cannot start, and exits 1.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/.." && pwd)"
DIR="${DLS_ENGINE_DIR:-${DLS_CACHE:-$REPO/.cache}/engine}"
PID_FILE="$DIR/dockerd.pid"
LOG="$DIR/dockerd.log"
TIMEOUT="${DLS_ENGINE_TIMEOUT:-60}"
DOCKER="${DOCKER:-docker}"

log() { printf '[engine.sh] %s\n' "$*" >&2; }

answers() { "$DOCKER" info >/dev/null 2>&1; }

our_pid() {
    local pid
    pid="$(cat "$PID_FILE" 2>/dev/null || true)"
    [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null \
        && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q dockerd && echo "$pid"
}

cmd_install() {
    local missing=()
    command -v dockerd >/dev/null || missing+=(docker.io)
    command -v docker-compose >/dev/null || missing+=(docker-compose)
    command -v mmdebstrap >/dev/null || command -v debootstrap >/dev/null || missing+=(mmdebstrap)
    ((${#missing[@]})) || return 0
    [[ "$(id -u)" == 0 ]] || { log "not root: cannot install ${missing[*]}"; return 1; }
    log "installing ${missing[*]}"
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}") \
        >"/tmp/dlsroute-engine-install.log" 2>&1 \
        || { log "apt-get install ${missing[*]} failed (/tmp/dlsroute-engine-install.log)"; return 1; }
}

cmd_up() {
    if answers; then log "an engine answers already"; return 0; fi
    command -v dockerd >/dev/null || { log "no engine: dockerd is not installed"; return 1; }
    [[ "$(id -u)" == 0 ]] || { log "no engine: dockerd needs root"; return 1; }
    mkdir -p "$DIR"
    log "starting dockerd (--bridge=none --iptables=false; log $LOG)"
    local setsid=()
    command -v setsid >/dev/null && setsid=(setsid)
    "${setsid[@]}" nohup dockerd --bridge=none --iptables=false --ip6tables=false \
        --ip-masq=false --pidfile "$PID_FILE" </dev/null >>"$LOG" 2>&1 &
    local pid=$! deadline=$((SECONDS + TIMEOUT))
    while ((SECONDS < deadline)); do
        if answers; then log "engine up (pid $pid)"; return 0; fi
        if ! kill -0 "$pid" 2>/dev/null; then
            log "no engine: dockerd exited: $(grep -E 'level=(error|fatal)' "$LOG" | tail -n 1)"
            return 1
        fi
        sleep 0.5
    done
    log "no engine: dockerd did not answer within ${TIMEOUT}s (log $LOG)"
    kill -TERM "$pid" 2>/dev/null || true
    return 1
}

cmd_down() {
    local pid
    if ! pid="$(our_pid)"; then log "no dockerd of ours is running"; return 0; fi
    log "stopping dockerd (pid $pid)"
    kill -TERM "$pid"
    local deadline=$((SECONDS + 30))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do sleep 0.2; done
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
    log "stopped"
}

cmd_status() {
    if answers; then echo "engine answers"; return 0; fi
    echo "no engine answers"
    return 3
}

case "${1:-}" in
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    install) cmd_install ;;
    *) echo "usage: $0 {up|down|status|install}" >&2; exit 2 ;;
esac
