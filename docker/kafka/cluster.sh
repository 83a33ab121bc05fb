# shellcheck shell=bash
# A local Kafka cluster of $BROKERS (2..9) KRaft servers on loopback: sourced by kafka.sh
# when BROKERS > 1, using its helpers (fetch, readiness check, log tails, stop).
#
# Layout: every server is a combined broker+controller and the controllers form a static
# quorum of $BROKERS voters (controller.quorum.voters). Of three, any one may die: the other
# two keep both the controller quorum (2 of 3 voters) and every partition's in-sync
# majority. (One controller and three brokers would make that controller the one process
# whose loss stops the cluster, and cost a fourth JVM on a small machine.)
#
# Ports: server i (1..$BROKERS) takes the client port KAFKA_PORT+i-1 (9092, 9093, 9094) and
# the controller port KAFKA_CONTROLLER_PORT+i-1, where KAFKA_CONTROLLER_PORT defaults to
# KAFKA_PORT+1000 here (10092..10094): clear of the single-broker layouts, whose
# controller is KAFKA_PORT+1.
#
# Topics: internal topics (consumer offsets, transaction state, share state) with
# replication factor min(3, BROKERS) and min.insync.replicas RF-1 (at least 1); the same as
# the cluster's defaults (default.replication.factor, min.insync.replicas), which every
# topic created without its own settings takes (a node's or client's replication_factor
# unset, or auto-created topics).
#
# Files: $DLS_CACHE/kafka/brokers$BROKERS-$KAFKA_PORT/ holds cluster-id and .lock, and
# node-<i>/ per server (server.properties, data/, server.log, stdout.log, kafka.pid,
# formatted-for).
#
# KAFKA_NODE=<i>: `up`, `down` and `status` act on server i alone (restart one killed
# server: KAFKA_NODE=2 kafka.sh up); default: all of them.

CLUSTER_BASE_PORT="$KAFKA_PORT"
CLUSTER_CONTROLLER_BASE="${KAFKA_CONTROLLER_PORT_SET:-$((KAFKA_PORT + 1000))}"
CLUSTER_DIR="$CACHE/brokers$BROKERS-$CLUSTER_BASE_PORT"
CLUSTER_RF=$((BROKERS < 3 ? BROKERS : 3))
CLUSTER_MIN_ISR=$((CLUSTER_RF > 1 ? CLUSTER_RF - 1 : 1))
CLUSTER_ID_FILE="$CLUSTER_DIR/cluster-id"
KAFKA_NODE="${KAFKA_NODE:-}"
if [[ -n "$KAFKA_NODE" ]] && ! [[ "$KAFKA_NODE" =~ ^[1-9]$ && "$KAFKA_NODE" -le "$BROKERS" ]]; then
    echo "[kafka.sh] KAFKA_NODE must be a server number 1..$BROKERS, got '$KAFKA_NODE'" >&2
    exit 2
fi
if ((CLUSTER_BASE_PORT + BROKERS - 1 > 65535 || CLUSTER_CONTROLLER_BASE + BROKERS - 1 > 65535)); then
    echo "[kafka.sh] ports past 65535: KAFKA_PORT=$CLUSTER_BASE_PORT, controllers from $CLUSTER_CONTROLLER_BASE" >&2
    exit 2
fi

# The servers `up`/`down`/`status` act on.
cluster_nodes() {
    if [[ -n "$KAFKA_NODE" ]]; then echo "$KAFKA_NODE"; else seq 1 "$BROKERS"; fi
}

# Point kafka.sh's per-broker globals at server $1.
select_node() {
    NODE_ID="$1"
    KAFKA_PORT=$((CLUSTER_BASE_PORT + NODE_ID - 1))
    KAFKA_CONTROLLER_PORT=$((CLUSTER_CONTROLLER_BASE + NODE_ID - 1))
    NODE_DIR="$CLUSTER_DIR/node-$NODE_ID"
    DATA_DIR="$NODE_DIR/data"
    PROPS="$NODE_DIR/server.properties"
    PID_FILE="$NODE_DIR/kafka.pid"
    FORMAT_STAMP="$NODE_DIR/formatted-for"
    SERVER_LOG="$NODE_DIR/server.log"
    STDOUT_LOG="$NODE_DIR/stdout.log"
}

cluster_bootstrap() {
    local i out=""
    for ((i = 0; i < BROKERS; i++)); do out+="${out:+,}127.0.0.1:$((CLUSTER_BASE_PORT + i))"; done
    echo "$out"
}

cluster_voters() {
    local i out=""
    for ((i = 1; i <= BROKERS; i++)); do
        out+="${out:+,}$i@127.0.0.1:$((CLUSTER_CONTROLLER_BASE + i - 1))"
    done
    echo "$out"
}

write_cluster_props() {
    mkdir -p "$NODE_DIR" "$DATA_DIR"
    cat >"$PROPS" <<EOF
# Written by docker/kafka/kafka.sh (BROKERS=$BROKERS) on every \`up\` -- edits are lost.
process.roles=broker,controller
node.id=$NODE_ID
controller.quorum.voters=$(cluster_voters)
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$DATA_DIR
num.partitions=1
auto.create.topics.enable=true
default.replication.factor=$CLUSTER_RF
min.insync.replicas=$CLUSTER_MIN_ISR
offsets.topic.replication.factor=$CLUSTER_RF
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=$CLUSTER_RF
transaction.state.log.min.isr=$CLUSTER_MIN_ISR
share.coordinator.state.topic.replication.factor=$CLUSTER_RF
share.coordinator.state.topic.min.isr=$CLUSTER_MIN_ISR
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=4
EOF
}

# Format server $NODE_ID's storage once for this voter set (a new set: wiped and again).
cluster_format_once() {
    local stamp
    stamp="$(cluster_voters)"
    if [[ -f "$DATA_DIR/meta.properties" ]]; then
        [[ "$(cat "$FORMAT_STAMP" 2>/dev/null || true)" == "$stamp" ]] && return 0
        log "voters changed; wiping $DATA_DIR and reformatting"
        rm -rf "$DATA_DIR"
        mkdir -p "$DATA_DIR"
    fi
    log "formatting $DATA_DIR (server $NODE_ID, cluster id $(cat "$CLUSTER_ID_FILE"))"
    kafka_java kafka.tools.StorageTool format -t "$(cat "$CLUSTER_ID_FILE")" -c "$PROPS" \
        >>"$STDOUT_LOG" 2>&1 || { tail -n 20 "$STDOUT_LOG" >&2; die "storage format failed"; }
    echo "$stamp" >"$FORMAT_STAMP"
}

# Start server $NODE_ID in the background (as cmd_up starts the single broker).
cluster_spawn() {
    local -a heap perf
    read -r -a heap <<<"$KAFKA_HEAP_OPTS"
    read -r -a perf <<<"$KAFKA_JVM_PERFORMANCE_OPTS"
    local setsid=()
    command -v setsid >/dev/null && setsid=(setsid)
    log "starting server $NODE_ID (client 127.0.0.1:$KAFKA_PORT, controller 127.0.0.1:$KAFKA_CONTROLLER_PORT)"
    "${setsid[@]}" nohup "$JAVA" "${heap[@]}" "${perf[@]}" -XX:+ExitOnOutOfMemoryError \
        -Djava.awt.headless=true \
        -Dkafka.logs.dir="$NODE_DIR" \
        -Dlog4j2.configurationFile="$LOG4J2_CONFIG" \
        -cp "$LIBS/*" kafka.Kafka "$PROPS" \
        </dev/null >>"$STDOUT_LOG" 2>&1 8>&- 9>&- &
    echo "$!" >"$PID_FILE"
}

cluster_up() {
    local i pid t0=$SECONDS started=() failed=0
    # Ports first: nothing is fetched or formatted for a start that cannot happen.
    for i in $(cluster_nodes); do
        select_node "$i"
        running_pid >/dev/null && continue
        port_open && die "client port 127.0.0.1:$KAFKA_PORT (server $i) is taken by a process not started for this cluster"
        port_open "$KAFKA_CONTROLLER_PORT" \
            && die "controller port 127.0.0.1:$KAFKA_CONTROLLER_PORT (server $i; KAFKA_CONTROLLER_PORT, default KAFKA_PORT+1000) is taken"
    done
    cmd_fetch
    command -v "$JAVA" >/dev/null || die "java ($JAVA) not found; Kafka 4.x needs Java 17+"
    mkdir -p "$CLUSTER_DIR"
    if [[ ! -s "$CLUSTER_ID_FILE" ]]; then
        kafka_java kafka.tools.StorageTool random-uuid >"$CLUSTER_ID_FILE.tmp"
        mv "$CLUSTER_ID_FILE.tmp" "$CLUSTER_ID_FILE"
    fi
    # Every server before any wait: the controllers elect a leader once a majority is up.
    for i in $(cluster_nodes); do
        select_node "$i"
        if pid="$(running_pid)"; then
            log "server $i already running (pid $pid)"
            continue
        fi
        write_cluster_props
        cluster_format_once
        cluster_spawn
        started+=("$i")
    done
    for i in $(cluster_nodes); do
        select_node "$i"
        pid="$(running_pid || true)"
        if wait_ready "$pid"; then
            log "server $i ready on 127.0.0.1:$KAFKA_PORT (pid $pid)"
        else
            show_log_tail
            failed=1
        fi
    done
    if ((failed == 0)); then
        # Every running server registered (a restarted one too): the metadata lists them.
        local alive
        alive="$(alive_count)"
        wait_brokers "$alive" || failed=1
    fi
    if ((failed)); then
        for i in "${started[@]}"; do select_node "$i"; cmd_down || true; done
        return 1
    fi
    log "cluster ready: bootstrap $(cluster_bootstrap) ($((SECONDS - t0))s)"
}

# How many servers run (their pid files name live processes). Run it in $(...): it moves
# the per-server globals.
alive_count() {
    local i n=0
    for ((i = 1; i <= BROKERS; i++)); do
        select_node "$i"
        if running_pid >/dev/null; then n=$((n + 1)); fi
    done
    echo "$n"
}

# Wait until a metadata answer from the selected server lists $1 brokers (the readiness check without Python: a port).
wait_brokers() {
    local deadline=$((SECONDS + KAFKA_UP_TIMEOUT))
    while ((SECONDS < deadline)); do
        admin_ok 5 "$1" && return 0
        sleep 0.5
    done
    log "the cluster did not list $1 brokers within ${KAFKA_UP_TIMEOUT}s"
    return 1
}

cluster_down() {
    local i
    # The last server's shutdown waits for no quorum: stop them all at once.
    for i in $(cluster_nodes); do
        select_node "$i"
        cmd_down &
    done
    wait
}

cluster_status() {
    local i pid rc=0
    for i in $(cluster_nodes); do
        select_node "$i"
        if pid="$(running_pid)" && port_open && admin_ok 5; then
            echo "running: server $i, pid $pid, 127.0.0.1:$KAFKA_PORT, dir $NODE_DIR"
        elif [[ -n "${pid:-}" ]]; then
            echo "starting or unhealthy: server $i, pid $pid, 127.0.0.1:$KAFKA_PORT not answering; log $SERVER_LOG"
            rc=3
        else
            echo "not running: server $i (127.0.0.1:$KAFKA_PORT)"
            rc=3
        fi
        pid=""
    done
    ((rc == 0)) && echo "bootstrap $(cluster_bootstrap)"
    return "$rc"
}

cluster_clean() {
    KAFKA_NODE="" cluster_down
    rm -rf "$CLUSTER_DIR"
    log "removed $CLUSTER_DIR"
}

cluster_lock() {
    mkdir -p "$CLUSTER_DIR"
    command -v flock >/dev/null || return 0
    exec 9>"$CLUSTER_DIR/.lock"
    flock -w $((KAFKA_UP_TIMEOUT + KAFKA_STOP_TIMEOUT + 300)) 9 || die "timed out waiting for $CLUSTER_DIR/.lock"
}

cluster_main() {
    case "${1:-}" in
        up | down | clean) cluster_lock ;;
    esac
    case "${1:-}" in
        fetch) cmd_fetch ;;
        up) cluster_up ;;
        down) cluster_down ;;
        status) cluster_status ;;
        clean) cluster_clean ;;
        *)
            echo "usage: BROKERS=$BROKERS $0 {fetch|up|down|status|clean}" >&2
            exit 2
            ;;
    esac
}
