#!/usr/bin/env bash
# A Docker engine of Stint's own: deploy/dockerd.sh start|stop|status|env
#
#   start   reuse an engine that answers on our socket, else start dockerd (installing
#           Debian's docker.io and docker-compose first when missing and we are root);
#           waits until it answers
#   tools   install what is missing of docker.io and docker-compose (root, Debian)
#   stop    stop the dockerd this script started (by its pidfile) and wait for it to exit
#   status  exit 0 when the engine answers, 1 otherwise
#   env     print `export DOCKER_HOST=...` for eval "$(deploy/dockerd.sh env)"
#
# The engine runs beside any other on the machine: its own socket, data root, exec
# root and pidfile. No bridge, no iptables: containers use host networking
# (`--network host`), which is all these machines allow.
set -euo pipefail

SOCKET=${STINT_DOCKER_SOCKET:-/run/stint-docker.sock}
DATA_ROOT=${STINT_DOCKER_ROOT:-/var/lib/stint-docker}
EXEC_ROOT=${STINT_DOCKER_EXEC_ROOT:-/run/stint-docker}
PIDFILE=${STINT_DOCKER_PIDFILE:-/run/stint-docker.pid}
LOG=${STINT_DOCKER_LOG:-/var/log/stint-dockerd.log}
START_TIMEOUT=${STINT_DOCKER_START_TIMEOUT:-60}
HOST="unix://$SOCKET"

answers() {
    [ -S "$SOCKET" ] || return 1
    timeout 5 docker -H "$HOST" version --format '{{.Server.Version}}' >/dev/null 2>&1
}

install_engine() {
    # The engine and a compose tool (the container tests drive compose files):
    # Debian has docker.io and, for compose, only the v1 docker-compose.
    local wanted=()
    command -v dockerd >/dev/null && command -v docker >/dev/null || wanted+=(docker.io)
    command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1 ||
        wanted+=(docker-compose)
    [ "${#wanted[@]}" -eq 0 ] && return 0
    if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
        echo "dockerd.sh: missing ${wanted[*]}; install them (apt-get install ${wanted[*]})" >&2
        return 1
    fi
    echo "dockerd.sh: installing Debian's ${wanted[*]}" >&2
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${wanted[@]}" >/dev/null
}

ours_running() {
    [ -f "$PIDFILE" ] && kill -0 "$(cat "$PIDFILE")" 2>/dev/null
}

start() {
    install_engine
    if answers; then
        echo "dockerd.sh: engine answers on $HOST (reused)" >&2
        return 0
    fi
    if ours_running; then
        echo "dockerd.sh: dockerd $(cat "$PIDFILE") runs but does not answer; stopping it" >&2
        stop
    fi
    mkdir -p "$DATA_ROOT" "$EXEC_ROOT" "$(dirname "$LOG")"
    local started=$SECONDS
    # setsid: the engine outlives this script and the shell (CI step) that ran it.
    setsid dockerd \
        --host "$HOST" \
        --data-root "$DATA_ROOT" \
        --exec-root "$EXEC_ROOT" \
        --pidfile "$PIDFILE" \
        --storage-driver=overlay2 \
        --iptables=false \
        --ip-masq=false \
        --bridge=none \
        >>"$LOG" 2>&1 </dev/null &
    local deadline=$((SECONDS + START_TIMEOUT))
    until answers; do
        if ! kill -0 $! 2>/dev/null; then
            echo "dockerd.sh: dockerd exited; last lines of $LOG:" >&2
            tail -n 20 "$LOG" >&2
            return 1
        fi
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "dockerd.sh: dockerd did not answer within ${START_TIMEOUT}s; see $LOG" >&2
            return 1
        fi
        sleep 0.2
    done
    echo "dockerd.sh: engine up on $HOST in $((SECONDS - started))s (log $LOG)" >&2
}

stop() {
    if ! ours_running; then
        echo "dockerd.sh: no dockerd of ours is running" >&2
        return 0
    fi
    local pid
    pid=$(cat "$PIDFILE")
    kill -TERM "$pid"
    local deadline=$((SECONDS + 60))
    while kill -0 "$pid" 2>/dev/null; do
        if [ "$SECONDS" -ge "$deadline" ]; then
            echo "dockerd.sh: dockerd $pid still running after 60s" >&2
            return 1
        fi
        sleep 0.2
    done
    echo "dockerd.sh: dockerd $pid stopped" >&2
}

case "${1:-}" in
    start) start ;;
    tools) install_engine ;;
    stop) stop ;;
    status) answers ;;
    env) echo "export DOCKER_HOST=$HOST" ;;
    *)
        echo "usage: $0 start|tools|stop|status|env" >&2
        exit 2
        ;;
esac
