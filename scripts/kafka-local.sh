#!/usr/bin/env bash
# kafka-local.sh: a real Apache Kafka 4.x cluster on 127.0.0.1 for kepoch's tests.
#
# One KRaft controller (node 100, port 19090) and three brokers (nodes 1, 2, 3,
# ports 19091-19093), each a JVM started from jars that Maven fetches once into
# a cache outside the repository. No Docker.
#
#   kafka-local.sh up            fetch jars if missing, format, start all four nodes, wait until ready
#                                (a no-op when the cluster is already up and healthy)
#   kafka-local.sh down          stop every node (SIGTERM, SIGKILL after a bounded wait); keeps logs
#   kafka-local.sh logs [N]      tail of the server logs (all nodes, or node N)
#   kafka-local.sh status        one line per node
#   kafka-local.sh fetch         only fetch the jars
#   kafka-local.sh start N       start node N (again) and wait until it serves
#   kafka-local.sh stop N        graceful stop (controlled shutdown), SIGKILL after KEPOCH_STOP_GRACE seconds
#   kafka-local.sh kill N        SIGKILL
#   kafka-local.sh pause N       SIGSTOP
#   kafka-local.sh resume N      SIGCONT
#
# Environment:
#   KEPOCH_KAFKA_VERSION   Kafka version (default 4.1.2)
#   KEPOCH_CACHE           jar cache root (default ${XDG_CACHE_HOME:-$HOME/.cache}/kepoch)
#   KEPOCH_KAFKA_STATE     state directory: configs, data, logs, pids (default /tmp/kepoch-kafka)
#   KEPOCH_STOP_GRACE      seconds a graceful stop may take before SIGKILL (default 30)
#   KEPOCH_READY_TIMEOUT   seconds to wait for a node to serve (default 240)
#   KEPOCH_KAFKA_PORT      controller port; broker N listens on it + N (default 19090)
set -euo pipefail

VERSION=${KEPOCH_KAFKA_VERSION:-4.1.2}
CACHE=${KEPOCH_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/kepoch}
LIB=$CACHE/kafka-$VERSION/lib
STATE=${KEPOCH_KAFKA_STATE:-/tmp/kepoch-kafka}
STOP_GRACE=${KEPOCH_STOP_GRACE:-30}
READY_TIMEOUT=${KEPOCH_READY_TIMEOUT:-240}
PORT=${KEPOCH_KAFKA_PORT:-19090}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NODES=(100 1 2 3)
BROKERS=(1 2 3)
READY_LINE='Kafka Server started'

log() { printf '[kafka-local %s] %s\n' "$(date +%H:%M:%S)" "$*" >&2; }
die() { log "error: $*"; exit 1; }

port_of() { if [ "$1" = 100 ]; then echo "$PORT"; else echo $((PORT + $1)); fi; }
node_dir() { echo "$STATE/node-$1"; }
pid_of() { cat "$(node_dir "$1")/pid" 2>/dev/null || true; }
# is_node N PID: PID is node N's JVM of this state directory. A pid file can
# outlive its JVM (a reboot, a crash) and the pid be reused by any process;
# and a SIGKILLed JVM stays a zombie, which kill -0 still finds, until its
# parent (init, or a CI container's PID 1 that may never reap) collects it.
# Both have no such argument (a zombie's cmdline is empty).
is_node() {
  [ -n "$2" ] && tr '\0' '\n' 2>/dev/null <"/proc/$2/cmdline" | grep -xF -- "-Dkafka.logs.dir=$(node_dir "$1")/logs" >/dev/null
}
alive() { is_node "$1" "$(pid_of "$1")"; }
# gone PID: the process has exited (no such process, or a zombie). For the
# process launch just started: until its fork has exec'd java its cmdline
# is still this script's, so is_node cannot tell it is starting (a loaded
# machine showed that as "died while starting" for a JVM that came up).
gone() { [ ! -e "/proc/$1" ] || grep -q '^State:[[:space:]]*Z' "/proc/$1/status" 2>/dev/null; }
port_taken() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
valid_node() { case " ${NODES[*]} " in *" $1 "*) ;; *) die "unknown node '$1' (nodes: ${NODES[*]})";; esac; }

fetch() {
  if [ -f "$LIB/.complete" ]; then return 0; fi
  command -v mvn >/dev/null || die "Maven (mvn) is needed to fetch Kafka $VERSION"
  command -v java >/dev/null || die "Java 17+ is needed to run Kafka $VERSION"
  log "fetching Kafka $VERSION jars with Maven into $LIB (once)"
  rm -rf "$LIB"
  mkdir -p "$LIB"
  mvn -B -q -Dstyle.color=never -f "$HERE/kafka/pom.xml" package \
    -Dkafka.version="$VERSION" -Dkepoch.lib="$LIB" >&2 || die "Maven could not fetch Kafka $VERSION"
  rm -rf "$HERE/kafka/target"
  for j in "kafka_2.13-$VERSION" "kafka-clients-$VERSION" log4j-core log4j-slf4j2-impl scala-library; do
    ls "$LIB" | grep -q "^$j" || die "jar $j missing from $LIB"
  done
  touch "$LIB/.complete"
  log "fetched $(ls "$LIB" | wc -l) jars ($(du -sh "$LIB" | cut -f1))"
}

write_log4j() {
  cat >"$STATE/log4j2.xml" <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="warn">
  <Appenders>
    <File name="FILE" fileName="${sys:kafka.logs.dir}/server.log" append="true">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </File>
  </Appenders>
  <Loggers>
    <Logger name="kafka.request.logger" level="warn"/>
    <Logger name="kafka.network.RequestChannel$" level="warn"/>
    <Logger name="org.apache.kafka.clients" level="warn"/>
    <Logger name="state.change.logger" level="info"/>
    <Root level="info"><AppenderRef ref="FILE"/></Root>
  </Loggers>
</Configuration>
EOF
  cat >"$STATE/log4j2-tools.xml" <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="warn">
  <Appenders><Console name="ERR" target="SYSTEM_ERR"><PatternLayout pattern="%p %m%n"/></Console></Appenders>
  <Loggers><Root level="warn"><AppenderRef ref="ERR"/></Root></Loggers>
</Configuration>
EOF
}

# Settings shared by every node. Timings are shortened for fault tests; the
# values are recorded in DESIGN.md ("Local cluster").
common_props() {
  cat <<EOF
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
controller.quorum.bootstrap.servers=127.0.0.1:$PORT
log.dirs=$(node_dir "$1")/data
num.partitions=1
default.replication.factor=3
min.insync.replicas=1
auto.create.topics.enable=false
unclean.leader.election.enable=false
auto.leader.rebalance.enable=false
offsets.topic.replication.factor=3
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=1
group.initial.rebalance.delay.ms=0
group.min.session.timeout.ms=1000
num.network.threads=2
num.io.threads=2
background.threads=4
num.recovery.threads.per.data.dir=1
log.flush.offset.checkpoint.interval.ms=5000
EOF
}

write_props() {
  local n=$1 d
  d=$(node_dir "$n")
  mkdir -p "$d/data" "$d/logs"
  {
    common_props "$n"
    echo "node.id=$n"
    if [ "$n" = 100 ]; then
      echo "process.roles=controller"
      echo "listeners=CONTROLLER://127.0.0.1:$PORT"
      echo "advertised.listeners=CONTROLLER://127.0.0.1:$PORT"
      echo "broker.session.timeout.ms=4000"
      echo "unclean.leader.election.interval.ms=1000"
    else
      echo "process.roles=broker"
      echo "listeners=PLAINTEXT://127.0.0.1:$(port_of "$n")"
      echo "advertised.listeners=PLAINTEXT://127.0.0.1:$(port_of "$n")"
      echo "inter.broker.listener.name=PLAINTEXT"
      echo "broker.heartbeat.interval.ms=500"
      echo "replica.lag.time.max.ms=5000"
      echo "replica.fetch.wait.max.ms=200"
      echo "producer.id.expiration.check.interval.ms=1000"
      echo "transactional.id.expiration.ms=604800000"
      # KIP-392: broker N is in rack rN, and a consumer that names its rack
      # is sent to a replica in it (integration/follower_test.go).
      echo "broker.rack=r$n"
      echo "replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector"
    fi
  } >"$d/server.properties"
}

java_tool() {
  java -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 -Djava.awt.headless=true \
    -Dlog4j2.configurationFile="$STATE/log4j2-tools.xml" -cp "$LIB/*" "$@"
}

format_all() {
  local cid pids=() n
  # A URL-safe base64 id that does not start with '-' (the storage tool
  # would read it as an option; Kafka's own random ids avoid it too).
  cid=-
  while [ "${cid:0:1}" = - ]; do
    cid=$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')
  done
  echo "$cid" >"$STATE/cluster.id"
  log "formatting storage (cluster id $cid)"
  for n in "${NODES[@]}"; do
    write_props "$n"
    if [ "$n" = 100 ]; then
      java_tool kafka.tools.StorageTool format --cluster-id="$cid" -c "$(node_dir "$n")/server.properties" --standalone \
        >"$(node_dir "$n")/logs/format.log" 2>&1 &
    else
      java_tool kafka.tools.StorageTool format --cluster-id="$cid" -c "$(node_dir "$n")/server.properties" --no-initial-controllers \
        >"$(node_dir "$n")/logs/format.log" 2>&1 &
    fi
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || { cat "$(node_dir "${NODES[$i]}")/logs/format.log" >&2; die "formatting node ${NODES[$i]} failed"; }
  done
}

# launch N: start the JVM of node N in the background, detached from this shell.
launch() {
  local n=$1 d heap port
  d=$(node_dir "$n")
  port=$(port_of "$n")
  if alive "$n"; then log "error: node $n is already running (pid $(pid_of "$n"))"; return 1; fi
  if port_taken "$port"; then
    log "error: port $port is taken by another process; node $n cannot start"
    return 1
  fi
  if [ "$n" = 100 ]; then heap=256m; else heap=512m; fi
  # Readiness is judged only from log lines written after this offset.
  stat -c %s "$d/logs/server.log" 2>/dev/null >"$d/log.offset" || echo 0 >"$d/log.offset"
  setsid nohup java -Xms128m -Xmx$heap -XX:+UseSerialGC -XX:+ExitOnOutOfMemoryError \
    -Djava.awt.headless=true -Dkepoch.local.node="$n" \
    -Dkafka.logs.dir="$d/logs" -Dlog4j2.configurationFile="$STATE/log4j2.xml" \
    -cp "$LIB/*" kafka.Kafka "$d/server.properties" >>"$d/logs/stdout.log" 2>&1 </dev/null &
  echo $! >"$d/pid"
}

wait_ready() {
  local n=$1 d off deadline
  d=$(node_dir "$n")
  off=$(cat "$d/log.offset" 2>/dev/null || echo 0)
  deadline=$((SECONDS + READY_TIMEOUT))
  while :; do
    # Not grep -q: it exits at the first match, tail then dies of SIGPIPE
    # when more than a pipe's worth of log follows, and with pipefail the
    # line is never seen.
    if tail -c +$((off + 1)) "$d/logs/server.log" 2>/dev/null | grep -F "$READY_LINE" >/dev/null; then return 0; fi
    if gone "$(pid_of "$n")"; then
      log "node $n died while starting; last log lines:"
      tail -n 40 "$d/logs/server.log" "$d/logs/stdout.log" >&2 2>/dev/null || true
      return 1
    fi
    if [ $SECONDS -ge $deadline ]; then
      log "node $n not ready after ${READY_TIMEOUT}s; last log lines:"
      tail -n 40 "$d/logs/server.log" >&2 2>/dev/null || true
      return 1
    fi
    sleep 0.25
  done
}

up() {
  fetch
  local all=1 n
  for n in "${NODES[@]}"; do alive "$n" || all=0; done
  if [ $all = 1 ]; then
    # A test that died between pause and resume leaves a frozen JVM.
    for n in "${NODES[@]}"; do kill -CONT "$(pid_of "$n")" 2>/dev/null || true; done
    log "cluster already up"; return 0
  fi
  for n in "${NODES[@]}"; do
    if alive "$n"; then log "node $n is up but the cluster is not whole; restarting all"; down; break; fi
  done
  # Fail before the previous state is moved away and four JVMs format it.
  for n in "${NODES[@]}"; do
    if port_taken "$(port_of "$n")"; then die "port $(port_of "$n") (node $n) is taken by another process; is another cluster running?"; fi
  done
  local t0=$SECONDS
  # The previous run's logs are kept (in $STATE.prev), its data is not: a
  # benchmark run can leave tens of GB.
  if [ -d "$STATE" ]; then rm -rf "$STATE.prev"; mv "$STATE" "$STATE.prev"; rm -rf "$STATE.prev"/node-*/data; fi
  mkdir -p "$STATE"
  write_log4j
  format_all
  launch 100 || { down; die "controller did not start"; }
  wait_ready 100 || { down; die "controller did not start"; }
  for n in "${BROKERS[@]}"; do launch "$n" || { down; die "broker $n did not start"; }; done
  for n in "${BROKERS[@]}"; do wait_ready "$n" || { down; die "broker $n did not start"; }; done
  log "cluster up in $((SECONDS - t0))s: bootstrap 127.0.0.1:$(port_of 1),127.0.0.1:$(port_of 2),127.0.0.1:$(port_of 3) (state $STATE)"
}

# stop_node N: graceful stop with escalation. A paused JVM gets SIGCONT first.
stop_node() {
  local n=$1 p deadline
  p=$(pid_of "$n")
  is_node "$n" "$p" || return 0
  kill -CONT "$p" 2>/dev/null || true
  kill -TERM "$p" 2>/dev/null || true
  deadline=$((SECONDS + STOP_GRACE))
  while is_node "$n" "$p"; do
    if [ $SECONDS -ge $deadline ]; then
      log "node $n did not stop within ${STOP_GRACE}s; SIGKILL"
      kill -KILL "$p" 2>/dev/null || true
    fi
    sleep 0.2
  done
}

kill_node() {
  local n=$1 p
  p=$(pid_of "$n")
  is_node "$n" "$p" || return 0
  kill -KILL "$p" 2>/dev/null || true
  while is_node "$n" "$p"; do sleep 0.05; done
}

down() {
  local n pids=()
  for n in "${BROKERS[@]}"; do stop_node "$n" & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p" || true; done
  stop_node 100
  # JVMs of this state directory that lost their pid file (a crashed
  # earlier run); never those of another state directory (another cluster).
  local f p args
  for f in /proc/[0-9]*/cmdline; do
    args=$(tr '\0' '\n' 2>/dev/null <"$f") || continue
    case $args in *"-Dkafka.logs.dir=$STATE/node-"*) ;; *) continue ;; esac
    p=${f#/proc/}; p=${p%/cmdline}
    kill -KILL "$p" 2>/dev/null || true
  done
  log "cluster down (logs kept in $STATE)"
}

logs() {
  local n
  if [ $# -gt 0 ]; then
    tail -n 200 "$(node_dir "$1")/logs/server.log"
    return
  fi
  for n in "${NODES[@]}"; do
    echo "==> node $n: $(node_dir "$n")/logs/server.log"
    tail -n 40 "$(node_dir "$n")/logs/server.log" 2>/dev/null || echo "(no log)"
  done
}

status() {
  local n
  for n in "${NODES[@]}"; do
    if alive "$n"; then
      if [ "$(ps -o stat= -p "$(pid_of "$n")" | cut -c1)" = T ]; then
        echo "node $n: paused (pid $(pid_of "$n"), port $(port_of "$n"))"
      else
        echo "node $n: running (pid $(pid_of "$n"), port $(port_of "$n"))"
      fi
    else
      echo "node $n: stopped"
    fi
  done
}

cmd=${1:-}
shift || true
case "$cmd" in
  fetch) fetch ;;
  up) up ;;
  down) down ;;
  logs) logs "$@" ;;
  status) status ;;
  start)
    valid_node "${1:?node}"
    # Idempotent: a node already running (e.g. still recovering its log
    # after an earlier start timed out) is only waited for.
    if alive "$1"; then log "node $1 already running; waiting until it serves"; else launch "$1" || exit 1; fi
    wait_ready "$1" ;;
  stop) valid_node "${1:?node}"; stop_node "$1" ;;
  kill) valid_node "${1:?node}"; kill_node "$1" ;;
  pause) valid_node "${1:?node}"; alive "$1" || die "node $1 is not running"; kill -STOP "$(pid_of "$1")" ;;
  resume) valid_node "${1:?node}"; alive "$1" || die "node $1 is not running"; kill -CONT "$(pid_of "$1")" ;;
  *) sed -n '2,/^set -euo pipefail/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; [ -z "$cmd" ] || exit 2 ;;
esac
