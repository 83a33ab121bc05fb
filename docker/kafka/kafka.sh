#!/usr/bin/env bash
# Local single-node Apache Kafka 4.x (KRaft, combined broker+controller) on loopback,
# run from Maven Central jars with plain `java` -- no Docker engine needed.
#
#   bash docker/kafka/kafka.sh fetch    # jars -> $CACHE/kafka-libs (skipped when present)
#   bash docker/kafka/kafka.sh up       # fetch, format storage once, start, wait until it answers
#   bash docker/kafka/kafka.sh down     # SIGTERM, SIGKILL after $KAFKA_STOP_TIMEOUT s; fine if not running
#   bash docker/kafka/kafka.sh status   # exit 0 when running and answering, 3 otherwise
#   bash docker/kafka/kafka.sh clean    # down, then delete this broker's data (next `up` reformats)
#   SECURE=1 bash docker/kafka/kafka.sh up   # the secure profile (below), default port 9392
#   BROKERS=3 bash docker/kafka/kafka.sh up  # three KRaft servers, 9092-9094 (cluster.sh)
#
# Environment:
#   DLS_CACHE              cache root (default: <repo>/.cache); Kafka lives in $DLS_CACHE/kafka
#   KAFKA_PORT             client listener, PLAINTEXT://127.0.0.1:$KAFKA_PORT (default 9092;
#                          with SECURE=1 SASL_SSL://127.0.0.1:$KAFKA_PORT, default 9392)
#   SECURE                 1: the secure profile. One SASL_SSL listener (SCRAM-SHA-512) for
#                          clients; the controller listener is SASL_SSL with PLAIN for `admin`
#                          only; no listener takes anonymous connections. KRaft's
#                          StandardAuthorizer with allow.everyone.if.no.acl.found=false and
#                          super.users=User:admin; no topic auto-creation. A CA and a broker
#                          certificate (openssl; for 127.0.0.1 and localhost) and admin's
#                          random password are made once in $DLS_CACHE/kafka/secure/ (ca.pem,
#                          broker.pem, admin.password), where admin's client settings are
#                          written on every `up` (admin.properties: librdkafka names, mode
#                          0600). Data in $DLS_CACHE/kafka/secure-broker-$KAFKA_PORT, apart
#                          from a plaintext broker's.
#   KAFKA_REAUTH_MS        secure: clients re-authenticate this often (default 60000), so the
#                          open sessions of a revoked user end within it
#   KAFKA_CONTROLLER_PORT  controller listener (default KAFKA_PORT+1, i.e. 9093; with
#                          BROKERS > 1 the first server's, default KAFKA_PORT+1000)
#   BROKERS                servers (default 1: the single broker described here); 2..9: a
#                          cluster of combined broker+controllers on consecutive ports, the
#                          topics' replication factor 3 (at most BROKERS) and
#                          min.insync.replicas 2 by default (docker/kafka/cluster.sh;
#                          KAFKA_NODE=<i> acts on server i alone). Not with SECURE=1.
#   KAFKA_UP_TIMEOUT       seconds `up` waits for the broker (default 60)
#   KAFKA_STOP_TIMEOUT     seconds `down` waits after SIGTERM before SIGKILL (default 20)
#   KAFKA_HEAP_OPTS        JVM heap flags (default "-Xmx1g -Xms256m")
#   KAFKA_JVM_PERFORMANCE_OPTS  garbage collector flags (default "-XX:+UseG1GC"; Kafka's own
#                          kafka-run-class.sh adds -XX:MaxGCPauseMillis=20
#                          -XX:InitiatingHeapOccupancyPercent=35: on 2 shared cores that made
#                          young collections shorter, 15-19 ms against 33-36, but not the
#                          latency probe's p99; -XX:+UseZGC has no long pause but its
#                          concurrent threads took CPU from the node, and its probe was no
#                          better either; so the default stays plain G1. See "The node loop" in
#                          docs/architecture.md)
#   JAVA                   java binary (default $JAVA_HOME/bin/java, else java); Java 17+
#   MVN                    maven binary (default mvn)
#   PYTHON                 python with confluent-kafka for the readiness check
#                          (default <repo>/.venv/bin/python; without it only the port is checked)
#
# Each port gets its own directory $DLS_CACHE/kafka/broker-$KAFKA_PORT holding
# server.properties, cluster-id, data/, server.log, stdout.log and kafka.pid.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
REPO="$(cd "$HERE/../.." && pwd)"
CACHE="${DLS_CACHE:-$REPO/.cache}/kafka"
LIBS="$CACHE/kafka-libs"
POM="$HERE/pom.xml"
LOG4J2_CONFIG="$HERE/log4j2.properties"

SECURE="${SECURE:-0}"
if [[ "$SECURE" != 1 && "$SECURE" != 0 ]]; then
    echo "[kafka.sh] SECURE must be 1 or 0, got '$SECURE'" >&2
    exit 2
fi
BROKERS="${BROKERS:-1}"
if ! [[ "$BROKERS" =~ ^[1-9]$ ]]; then
    echo "[kafka.sh] BROKERS must be 1..9, got '$BROKERS'" >&2
    exit 2
fi
if [[ "$SECURE" == 1 && "$BROKERS" != 1 ]]; then
    echo "[kafka.sh] SECURE=1 runs one broker; BROKERS=$BROKERS is not supported with it" >&2
    exit 2
fi
if [[ "$SECURE" == 1 ]]; then KAFKA_PORT="${KAFKA_PORT:-9392}"; else KAFKA_PORT="${KAFKA_PORT:-9092}"; fi
KAFKA_REAUTH_MS="${KAFKA_REAUTH_MS:-60000}"
KAFKA_CONTROLLER_PORT_SET="${KAFKA_CONTROLLER_PORT:-}"
KAFKA_CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-$((KAFKA_PORT + 1))}"
KAFKA_UP_TIMEOUT="${KAFKA_UP_TIMEOUT:-60}"
KAFKA_STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-20}"
KAFKA_HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xmx1g -Xms256m}"
KAFKA_JVM_PERFORMANCE_OPTS="${KAFKA_JVM_PERFORMANCE_OPTS:--XX:+UseG1GC}"
MVN="${MVN:-mvn}"
if [[ -z "${JAVA:-}" ]]; then
    if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then JAVA="$JAVA_HOME/bin/java"; else JAVA=java; fi
fi
PY="${PYTHON:-$REPO/.venv/bin/python}"

SECURE_DIR="$CACHE/secure"
if [[ "$SECURE" == 1 ]]; then NODE_DIR="$CACHE/secure-broker-$KAFKA_PORT"; else NODE_DIR="$CACHE/broker-$KAFKA_PORT"; fi
DATA_DIR="$NODE_DIR/data"
PROPS="$NODE_DIR/server.properties"
PID_FILE="$NODE_DIR/kafka.pid"
CLUSTER_ID_FILE="$NODE_DIR/cluster-id"
FORMAT_STAMP="$NODE_DIR/formatted-for"   # controller port the storage was formatted with
SERVER_LOG="$NODE_DIR/server.log"
STDOUT_LOG="$NODE_DIR/stdout.log"
LIBS_STAMP="$LIBS/.pom.sha256"           # which pom.xml filled kafka-libs

log() { printf '[kafka.sh] %s\n' "$*" >&2; }
die() { log "$*"; exit 1; }

# ---------------------------------------------------------------- fetch
pom_sum() { sha256sum "$POM" | cut -d' ' -f1; }

libs_ok() {
    compgen -G "$LIBS/kafka_2.13-*.jar" >/dev/null && [[ -f "$LIBS_STAMP" && "$(cat "$LIBS_STAMP")" == "$(pom_sum)" ]]
}

cmd_fetch() {
    if libs_ok; then
        log "jars present in $LIBS"
        return 0
    fi
    mkdir -p "$CACHE"
    if command -v flock >/dev/null; then
        # Concurrent fetches (two ports, parallel test workers) wait for each other.
        exec 8>"$CACHE/.fetch.lock"
        flock 8
        if libs_ok; then
            exec 8>&-
            log "jars present in $LIBS"
            return 0
        fi
    fi
    command -v "$MVN" >/dev/null || die "maven ($MVN) not found; needed once to fetch the Kafka jars"
    mkdir -p "$CACHE"
    local tmp="$CACHE/kafka-libs.tmp.$$"
    rm -rf "$tmp"
    log "fetching Kafka jars from Maven Central into $LIBS ..."
    # -B: no colour codes or progress bars in logs.
    if ! "$MVN" -q -B -Dstyle.color=never -f "$POM" dependency:copy-dependencies \
        -DoutputDirectory="$tmp" -DincludeScope=runtime; then
        rm -rf "$tmp"
        die "mvn dependency:copy-dependencies failed"
    fi
    pom_sum >"$tmp/.pom.sha256"
    rm -rf "$LIBS"
    mv "$tmp" "$LIBS"   # never a half-filled folder on the classpath
    exec 8>&-
    log "$(find "$LIBS" -name '*.jar' | wc -l) jars in $LIBS"
}

# ---------------------------------------------------------------- helpers
kafka_java() { "$JAVA" -cp "$LIBS/*" "$@"; }

# pid from the pid file if that process is alive and is our broker (guards against pid reuse).
running_pid() {
    [[ -f "$PID_FILE" ]] || return 1
    local pid
    pid="$(cat "$PID_FILE" 2>/dev/null || true)"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    if [[ -r "/proc/$pid/cmdline" ]]; then
        tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF "$PROPS" || return 1
    fi
    echo "$pid"
}

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/${1:-$KAFKA_PORT}") 2>/dev/null; }

have_py_kafka() { [[ -x "$PY" ]] && "$PY" -c 'import confluent_kafka' 2>/dev/null; }

# Metadata request via confluent-kafka: the broker must list itself (or $2 brokers, default
# 1). $1 = timeout (s).
admin_ok() {
    if ! have_py_kafka; then
        port_open
        return
    fi
    local props=""
    [[ "$SECURE" == 1 ]] && props="$SECURE_DIR/admin.properties"
    "$PY" - "127.0.0.1:$KAFKA_PORT" "$1" "$props" "${2:-1}" <<'PY' 2>/dev/null
import sys

from confluent_kafka.admin import AdminClient

bootstrap, timeout, props = sys.argv[1], float(sys.argv[2]), sys.argv[3]
want = int(sys.argv[4])
conf = {"bootstrap.servers": bootstrap, "log_level": 0}
if props:  # the secure profile: admin's librdkafka settings (key=value lines)
    with open(props, encoding="utf-8") as fh:
        for line in fh:
            if line.strip() and not line.lstrip().startswith("#"):
                key, _, value = line.strip().partition("=")
                conf[key.strip()] = value.strip()
admin = AdminClient(conf)
md = admin.list_topics(timeout=timeout)
sys.exit(0 if len(md.brokers) >= want else 1)
PY
}

write_props() {
    mkdir -p "$NODE_DIR" "$DATA_DIR"
    if [[ "$SECURE" == 1 ]]; then
        write_secure_props
        return
    fi
    cat >"$PROPS" <<EOF
# Written by docker/kafka/kafka.sh on every \`up\` -- edits are lost.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=PLAINTEXT://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$DATA_DIR
num.partitions=1
auto.create.topics.enable=true
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=4
EOF
}

# ---------------------------------------------------------------- the secure profile
# A CA, a broker certificate for 127.0.0.1/localhost signed by it, and admin's password,
# made once in $SECURE_DIR (shared by every secure port), and admin.properties.
make_secrets() {
    command -v openssl >/dev/null || die "openssl not found; the secure profile makes its certificates with it"
    mkdir -p "$SECURE_DIR"
    chmod 700 "$SECURE_DIR"
    if command -v flock >/dev/null; then
        exec 7>"$SECURE_DIR/.lock"
        flock 7
    fi
    local old_umask
    old_umask="$(umask)"
    umask 077
    if [[ ! -s "$SECURE_DIR/ca.pem" || ! -s "$SECURE_DIR/ca.key" ]]; then
        log "making a CA in $SECURE_DIR"
        openssl req -x509 -newkey rsa:2048 -nodes -days 3650 -subj "/CN=dlsroute local CA" \
            -keyout "$SECURE_DIR/ca.key" -out "$SECURE_DIR/ca.pem" >/dev/null 2>&1 \
            || die "openssl could not make the CA"
        rm -f "$SECURE_DIR/broker.pem"
    fi
    if [[ ! -s "$SECURE_DIR/broker.pem" ]]; then
        log "making the broker certificate (127.0.0.1, localhost)"
        local tmp="$SECURE_DIR/tmp.$$"
        mkdir -p "$tmp"
        printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth,clientAuth\n' >"$tmp/ext"
        openssl req -newkey rsa:2048 -nodes -subj "/CN=localhost" \
            -keyout "$tmp/key.pem" -out "$tmp/broker.csr" >/dev/null 2>&1 \
            && openssl x509 -req -in "$tmp/broker.csr" -CA "$SECURE_DIR/ca.pem" \
                -CAkey "$SECURE_DIR/ca.key" -CAcreateserial -days 3650 -extfile "$tmp/ext" \
                -out "$tmp/cert.pem" >/dev/null 2>&1 \
            && openssl pkcs8 -topk8 -nocrypt -in "$tmp/key.pem" -out "$tmp/key8.pem" \
            || { rm -rf "$tmp"; die "openssl could not make the broker certificate"; }
        # Kafka's PEM key store: the PKCS#8 key, then the certificate chain.
        cat "$tmp/key8.pem" "$tmp/cert.pem" "$SECURE_DIR/ca.pem" >"$SECURE_DIR/broker.pem.tmp"
        mv "$SECURE_DIR/broker.pem.tmp" "$SECURE_DIR/broker.pem"
        rm -rf "$tmp"
    fi
    if [[ ! -s "$SECURE_DIR/admin.password" ]]; then
        # Letters and digits only: the password goes into JAAS lines and a properties file.
        openssl rand -base64 64 | tr -dc 'A-Za-z0-9' | head -c 32 >"$SECURE_DIR/admin.password.tmp"
        mv "$SECURE_DIR/admin.password.tmp" "$SECURE_DIR/admin.password"
    fi
    cat >"$SECURE_DIR/admin.properties.tmp" <<EOF
# The super user of the local secure Kafka on 127.0.0.1:$KAFKA_PORT (docker/kafka/kafka.sh;
# librdkafka names). dlsroute --kafka-config and dlsroute access --admin-config take it.
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.username=admin
sasl.password=$(cat "$SECURE_DIR/admin.password")
ssl.ca.location=$SECURE_DIR/ca.pem
EOF
    mv "$SECURE_DIR/admin.properties.tmp" "$SECURE_DIR/admin.properties"
    umask "$old_umask"
    if command -v flock >/dev/null; then exec 7>&-; fi
    return 0
}

write_secure_props() {
    local pw
    pw="$(cat "$SECURE_DIR/admin.password")"
    (
        umask 077
        cat >"$PROPS" <<EOF
# Written by docker/kafka/kafka.sh (SECURE=1) on every \`up\` -- edits are lost.
process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:$KAFKA_CONTROLLER_PORT
listeners=SASL_SSL://127.0.0.1:$KAFKA_PORT,CONTROLLER://127.0.0.1:$KAFKA_CONTROLLER_PORT
advertised.listeners=SASL_SSL://127.0.0.1:$KAFKA_PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=SASL_SSL
listener.security.protocol.map=CONTROLLER:SASL_SSL,SASL_SSL:SASL_SSL
# Clients and the broker itself: SCRAM-SHA-512 over TLS (SCRAM cannot serve the controller
# listener); the controller: PLAIN over TLS, admin only.
listener.name.sasl_ssl.sasl.enabled.mechanisms=SCRAM-SHA-512
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="$pw";
listener.name.controller.sasl.enabled.mechanisms=PLAIN
sasl.mechanism.controller.protocol=PLAIN
listener.name.controller.plain.sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="$pw" user_admin="$pw";
ssl.keystore.type=PEM
ssl.keystore.location=$SECURE_DIR/broker.pem
ssl.truststore.type=PEM
ssl.truststore.location=$SECURE_DIR/ca.pem
ssl.client.auth=none
connections.max.reauth.ms=$KAFKA_REAUTH_MS
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin
log.dirs=$DATA_DIR
num.partitions=1
auto.create.topics.enable=false
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=4
EOF
    )
}

format_once() {
    if [[ ! -s "$CLUSTER_ID_FILE" ]]; then
        kafka_java kafka.tools.StorageTool random-uuid >"$CLUSTER_ID_FILE.tmp"
        mv "$CLUSTER_ID_FILE.tmp" "$CLUSTER_ID_FILE"
    fi
    # The single-voter quorum records the controller endpoint at format time.
    # Secure: admin's SCRAM credential is part of the formatted metadata, so a new password
    # (secure/ deleted) needs a fresh format too.
    local stamp="$KAFKA_CONTROLLER_PORT" scram=()
    if [[ "$SECURE" == 1 ]]; then
        stamp="$stamp $(sha256sum "$SECURE_DIR/admin.password" | cut -d' ' -f1)"
        scram=(--add-scram "SCRAM-SHA-512=[name=admin,password=$(cat "$SECURE_DIR/admin.password")]")
    fi
    if [[ -f "$DATA_DIR/meta.properties" ]]; then
        if [[ "$(cat "$FORMAT_STAMP" 2>/dev/null || true)" == "$stamp" ]]; then
            return 0
        fi
        log "controller port or admin password changed; wiping $DATA_DIR and reformatting"
        rm -rf "$DATA_DIR"
        mkdir -p "$DATA_DIR"
    fi
    log "formatting $DATA_DIR (cluster id $(cat "$CLUSTER_ID_FILE"))"
    kafka_java kafka.tools.StorageTool format --standalone \
        -t "$(cat "$CLUSTER_ID_FILE")" -c "$PROPS" "${scram[@]}" >>"$STDOUT_LOG" 2>&1 \
        || { tail -n 20 "$STDOUT_LOG" >&2; die "storage format failed"; }
    echo "$stamp" >"$FORMAT_STAMP"
}

# Wait until the broker answers; $1 = pid to watch (empty: don't watch).
wait_ready() {
    local pid="$1" deadline=$((SECONDS + KAFKA_UP_TIMEOUT)) left
    while ((SECONDS < deadline)); do
        if [[ -n "$pid" ]] && ! kill -0 "$pid" 2>/dev/null; then
            log "broker process $pid exited during startup"
            return 1
        fi
        if port_open; then
            left=$((deadline - SECONDS))
            ((left < 2)) && left=2
            ((left > 10)) && left=10
            admin_ok "$left" && return 0
        fi
        sleep 0.25
    done
    log "broker did not answer on 127.0.0.1:$KAFKA_PORT within ${KAFKA_UP_TIMEOUT}s"
    return 1
}

show_log_tail() {
    local f
    for f in "$STDOUT_LOG" "$SERVER_LOG"; do
        [[ -s "$f" ]] || continue
        log "---- tail of $f"
        tail -n 30 "$f" >&2
    done
}

# ---------------------------------------------------------------- up / down / status
cmd_up() {
    local pid
    if pid="$(running_pid)"; then
        if port_open && admin_ok 5; then
            log "already running (pid $pid) on 127.0.0.1:$KAFKA_PORT"
            return 0
        fi
        log "pid $pid is starting; waiting"
        wait_ready "$pid" && { log "ready on 127.0.0.1:$KAFKA_PORT"; return 0; }
        show_log_tail
        return 1
    fi
    if port_open; then
        if admin_ok 5; then
            log "a Kafka broker not started by this script already answers on 127.0.0.1:$KAFKA_PORT; using it"
            return 0
        fi
        die "port 127.0.0.1:$KAFKA_PORT is taken by something that is not a Kafka broker"
    fi
    # The controller listener is KAFKA_PORT+1 by default: a broker on the port below
    # (its client port) would take it, and this broker would die at start with no clear word.
    if port_open "$KAFKA_CONTROLLER_PORT"; then
        die "controller port 127.0.0.1:$KAFKA_CONTROLLER_PORT (KAFKA_CONTROLLER_PORT, default KAFKA_PORT+1) is taken; pick KAFKA_PORT values at least 2 apart, or set KAFKA_CONTROLLER_PORT"
    fi

    local t0=$SECONDS
    cmd_fetch
    command -v "$JAVA" >/dev/null || die "java ($JAVA) not found; Kafka 4.x needs Java 17+"
    if [[ "$SECURE" == 1 ]]; then make_secrets; fi
    write_props
    format_once

    log "starting Kafka (client 127.0.0.1:$KAFKA_PORT, controller 127.0.0.1:$KAFKA_CONTROLLER_PORT)"
    # stdin/stdout/stderr all detached from the caller: a caller that captures our output
    # (subprocess.run(capture_output=True), $(...)) would otherwise wait for the broker to exit.
    # setsid: Ctrl-C in the caller's terminal does not reach the broker.
    local -a heap perf
    read -r -a heap <<<"$KAFKA_HEAP_OPTS"
    read -r -a perf <<<"$KAFKA_JVM_PERFORMANCE_OPTS"
    local setsid=()
    command -v setsid >/dev/null && setsid=(setsid)
    "${setsid[@]}" nohup "$JAVA" "${heap[@]}" "${perf[@]}" -XX:+ExitOnOutOfMemoryError \
        -Djava.awt.headless=true \
        -Dkafka.logs.dir="$NODE_DIR" \
        -Dlog4j2.configurationFile="$LOG4J2_CONFIG" \
        -cp "$LIBS/*" kafka.Kafka "$PROPS" \
        </dev/null >>"$STDOUT_LOG" 2>&1 8>&- 9>&- &
    pid=$!
    echo "$pid" >"$PID_FILE"

    if wait_ready "$pid"; then
        log "ready on 127.0.0.1:$KAFKA_PORT (pid $pid, $((SECONDS - t0))s)"
        return 0
    fi
    show_log_tail
    log "stopping the half-started broker"
    cmd_down || true
    return 1
}

cmd_down() {
    local pid
    if ! pid="$(running_pid)"; then
        rm -f "$PID_FILE"
        log "not running"
        return 0
    fi
    log "stopping pid $pid"
    kill -TERM "$pid" 2>/dev/null || true
    local deadline=$((SECONDS + KAFKA_STOP_TIMEOUT))
    while kill -0 "$pid" 2>/dev/null && ((SECONDS < deadline)); do
        sleep 0.2
    done
    if kill -0 "$pid" 2>/dev/null; then
        log "still alive after ${KAFKA_STOP_TIMEOUT}s; SIGKILL"
        kill -KILL "$pid" 2>/dev/null || true
        while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
    fi
    rm -f "$PID_FILE"
    log "stopped"
}

cmd_status() {
    local pid
    if pid="$(running_pid)"; then
        if port_open && admin_ok 5; then
            echo "running: pid $pid, bootstrap 127.0.0.1:$KAFKA_PORT, dir $NODE_DIR"
            return 0
        fi
        echo "starting or unhealthy: pid $pid, 127.0.0.1:$KAFKA_PORT not answering; log $SERVER_LOG"
        return 3
    fi
    echo "not running (127.0.0.1:$KAFKA_PORT)"
    return 3
}

cmd_clean() {
    cmd_down
    rm -rf "$NODE_DIR"
    log "removed $NODE_DIR"
}

# up/down/clean of one broker directory are serialised (parallel test workers may all call `up`).
# The lock fds are closed for the broker process, so the lock is never held by it.
lock_node() {
    mkdir -p "$NODE_DIR"
    command -v flock >/dev/null || return 0
    exec 9>"$NODE_DIR/.lock"
    flock -w $((KAFKA_UP_TIMEOUT + KAFKA_STOP_TIMEOUT + 300)) 9 || die "timed out waiting for $NODE_DIR/.lock"
}

if [[ "$BROKERS" != 1 ]]; then
    # shellcheck source=docker/kafka/cluster.sh
    source "$HERE/cluster.sh"
    cluster_main "$@"
    exit
fi

case "${1:-}" in
    up | down | clean) lock_node ;;
esac

case "${1:-}" in
    fetch) cmd_fetch ;;
    up) cmd_up ;;
    down) cmd_down ;;
    status) cmd_status ;;
    clean) cmd_clean ;;
    *)
        echo "usage: $0 {fetch|up|down|status|clean}" >&2
        exit 2
        ;;
esac
