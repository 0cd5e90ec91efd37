#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Redis servers for the store and tier tests, on 127.0.0.1 only:
#   start DIR   one plain server, one with a password and an ACL user, and a
#               Redis Cluster of 3 masters + 3 replicas (cluster-node-timeout
#               1000 ms, so a killed master's replica takes over in ~2 s);
#               waits until each answers (the cluster: cluster_state:ok) and
#               writes DIR/env, the variables the tests read:
#                 LAZYATTN_TEST_REDIS=127.0.0.1:PORT
#                 LAZYATTN_TEST_REDIS_AUTH=redis://lazyattn:PW@127.0.0.1:PORT
#                   (the ACL user; the default user's password in
#                    LAZYATTN_TEST_REDIS_AUTH_DEFAULT=PW)
#                 LAZYATTN_TEST_REDIS_CLUSTER=127.0.0.1:P1,...,127.0.0.1:P6
#   stop DIR    stops every server started in DIR (by its pid file) and
#               removes DIR.
# Usage by hand:  tools/redis_test_servers.sh start /tmp/rt && . /tmp/rt/env
#                 ... tools/redis_test_servers.sh stop /tmp/rt
set -euo pipefail

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# A free port for a cluster node: <= 55535, its bus port (+10000) free too.
free_cluster_port() {
    python3 - <<'PY'
import socket
while True:
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]
    if p > 55535: continue
    b = socket.socket()
    try: b.bind(("127.0.0.1", p + 10000))
    except OSError: continue
    print(p); break
PY
}

# start_server DIR NAME PORT [ARGS...]
start_server() {
    local dir=$1 name=$2 port=$3
    shift 3
    mkdir -p "$dir/$name"
    redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no --daemonize yes \
        --dir "$dir/$name" --pidfile "$dir/$name/redis.pid" --logfile "$dir/$name/redis.log" "$@"
}

# wait_ping PORT [redis-cli ARGS...]: until PONG, 5 s at most
wait_ping() {
    local port=$1
    shift
    for _ in $(seq 50); do
        [ "$(redis-cli -p "$port" "$@" ping 2>/dev/null)" = PONG ] && return 0
        sleep 0.1
    done
    echo "redis on port $port does not answer" >&2
    return 1
}

start() {
    local dir=$1
    mkdir -p "$dir"
    local plain auth pw
    plain=$(free_port)
    start_server "$dir" plain "$plain"
    wait_ping "$plain"

    # A password for the default user, and an ACL user limited to the
    # tests' keys with what the store needs.
    auth=$(free_port)
    pw=$(python3 -c 'import secrets; print(secrets.token_hex(12))')
    start_server "$dir" auth "$auth" --requirepass "$pw" \
        --user lazyattn on ">$pw" '~lazyattn*' +get +set +del +strlen +eval +ping \
        +auth '+cluster|slots'
    wait_ping "$auth" --no-auth-warning -a "$pw"

    local ports=() p
    for i in 1 2 3 4 5 6; do
        p=$(free_cluster_port)
        ports+=("$p")
        start_server "$dir" "cluster$i" "$p" --cluster-enabled yes \
            --cluster-config-file "$dir/cluster$i/nodes.conf" --cluster-node-timeout 1000 \
            --repl-diskless-sync-delay 0
    done
    for p in "${ports[@]}"; do wait_ping "$p"; done
    local nodes=()
    for p in "${ports[@]}"; do nodes+=("127.0.0.1:$p"); done
    redis-cli --cluster create "${nodes[@]}" --cluster-replicas 1 --cluster-yes >"$dir/create.log" 2>&1
    local ok=0
    for _ in $(seq 100); do
        ok=1
        for p in "${ports[@]}"; do
            redis-cli -p "$p" cluster info 2>/dev/null | grep -q '^cluster_state:ok' || ok=0
            # a replica synchronised (it can take over from its master)
            if redis-cli -p "$p" info replication 2>/dev/null | grep -q '^role:slave'; then
                redis-cli -p "$p" info replication | grep -q '^master_link_status:up' || ok=0
            fi
        done
        [ $ok = 1 ] && break
        sleep 0.1
    done
    if [ $ok != 1 ]; then
        cat "$dir/create.log" >&2
        echo "the Redis Cluster did not reach cluster_state:ok" >&2
        return 1
    fi
    local seeds
    seeds=$(IFS=,; echo "${nodes[*]}")
    cat >"$dir/env" <<ENV
export LAZYATTN_TEST_REDIS=127.0.0.1:$plain
export LAZYATTN_TEST_REDIS_AUTH=redis://lazyattn:$pw@127.0.0.1:$auth
export LAZYATTN_TEST_REDIS_AUTH_DEFAULT=$pw
export LAZYATTN_TEST_REDIS_CLUSTER=$seeds
ENV
}

stop() {
    local dir=$1 pid f pids=()
    [ -d "$dir" ] || return 0
    # Each pid is read once: a server removes its own pid file as it exits,
    # so a second read can find it gone.
    for f in "$dir"/*/redis.pid; do
        pid=$(cat "$f" 2>/dev/null) || continue
        # only a redis-server of this DIR (the pid file may be stale)
        if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q redis-server; then
            kill "$pid" 2>/dev/null || true
            pids+=("$pid")
        fi
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -9 "$pid" 2>/dev/null || true
    done
    rm -rf "$dir"
}

case "${1:-}" in
start) start "${2:?usage: $0 start|stop DIR}" ;;
stop) stop "${2:?usage: $0 start|stop DIR}" ;;
*)
    echo "usage: $0 start|stop DIR" >&2
    exit 2
    ;;
esac
