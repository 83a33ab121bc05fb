#!/usr/bin/env bash
# Entry point of the dlsroute-kafka image (docker/images.sh): Kafka 4.x in KRaft mode from
# the jars in /opt/kafka/libs, configured the way the public apache/kafka image is, so that
# docker/compose.yaml and the tests' fixture run either image with the same environment:
#
#   KAFKA_<NAME>   one server property each: lower case, "___" -> "-", "__" -> "_", "_" -> "."
#                  (KAFKA_NODE_ID=2 -> node.id=2); without any, a single combined
#                  broker+controller on localhost:9092 (controller 9093).
#   CLUSTER_ID     the KRaft cluster id the storage is formatted with (once; the same on
#                  every server of a cluster)
#   KAFKA_HEAP_OPTS, KAFKA_JVM_PERFORMANCE_OPTS, KAFKA_OPTS   JVM flags (not properties)
#   DLS_KAFKA_HOME, DLS_KAFKA_PROPS   where the jars are (/opt/kafka) and the properties go
#                  (/etc/kafka/server.properties)
#
# Logs go to stdout ("Kafka Server started" once it serves). Data: log.dirs, default
# /var/lib/kafka/data (a fresh container formats it; a restarted one keeps it).
set -euo pipefail

KAFKA_HOME="${DLS_KAFKA_HOME:-/opt/kafka}"
PROPS="${DLS_KAFKA_PROPS:-/etc/kafka/server.properties}"
CLUSTER_ID="${CLUSTER_ID:-5L6g3nShT-eMCtK--X86sw}"
read -r -a heap <<<"${KAFKA_HEAP_OPTS:--Xmx512m -Xms128m}"
read -r -a perf <<<"${KAFKA_JVM_PERFORMANCE_OPTS:--XX:+UseG1GC}"
read -r -a extra <<<"${KAFKA_OPTS:-}"
mkdir -p "$(dirname "$PROPS")"

not_properties=" KAFKA_HEAP_OPTS KAFKA_JVM_PERFORMANCE_OPTS KAFKA_OPTS KAFKA_LOG4J_OPTS KAFKA_HOME "
props=()
while IFS='=' read -r name value; do
    [[ "$name" == KAFKA_* && "$not_properties" != *" $name "* ]] || continue
    key="${name#KAFKA_}"
    key="${key,,}"
    key="${key//___/-}"
    key="${key//__/@}"   # placeholder: "__" is a literal underscore
    key="${key//_/.}"
    props+=("${key//@/_}=$value")
done < <(env)

if ((${#props[@]} == 0)); then
    props=(
        node.id=1 process.roles=broker,controller
        listeners=PLAINTEXT://:9092,CONTROLLER://:9093
        advertised.listeners=PLAINTEXT://localhost:9092
        controller.listener.names=CONTROLLER
        listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
        controller.quorum.voters=1@localhost:9093
        offsets.topic.replication.factor=1 transaction.state.log.replication.factor=1
        transaction.state.log.min.isr=1 share.coordinator.state.topic.replication.factor=1
        share.coordinator.state.topic.min.isr=1 group.initial.rebalance.delay.ms=0
    )
fi
printf '%s\n' "${props[@]}" >"$PROPS"
grep -q '^log\.dirs=' "$PROPS" || echo "log.dirs=/var/lib/kafka/data" >>"$PROPS"

kafka_java() { java "${heap[@]}" -cp "$KAFKA_HOME/libs/*" "$@"; }
log_dir="$(sed -n 's/^log\.dirs=//p' "$PROPS" | cut -d, -f1)"
if [[ ! -f "$log_dir/meta.properties" ]]; then
    standalone=()
    # A dynamic quorum (controller.quorum.bootstrap.servers, no static voters) of one.
    grep -q '^controller\.quorum\.voters=' "$PROPS" || standalone=(--standalone)
    kafka_java -Dlog4j2.configurationFile="$KAFKA_HOME/log4j2.properties" \
        kafka.tools.StorageTool format --ignore-formatted -t "$CLUSTER_ID" -c "$PROPS" \
        "${standalone[@]}"
fi

exec java "${heap[@]}" "${perf[@]}" "${extra[@]}" -XX:+ExitOnOutOfMemoryError \
    -Djava.awt.headless=true -Dlog4j2.configurationFile="$KAFKA_HOME/log4j2.properties" \
    -cp "$KAFKA_HOME/libs/*" kafka.Kafka "$PROPS"
