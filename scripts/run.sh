#!/usr/bin/env bash
# `make run`: the gateway on its embedded default config, on one machine.
# Starts redis-server (unless one already answers on 127.0.0.1:6379, which is
# then used and said so), the two mock relays the default config points at,
# `swarmgate serve`, and Envoy (ENVOY_BIN, else `envoy` on PATH, else the
# pinned release scripts/envoy.sh installs), then prints a request that works.
# Ctrl-C or SIGTERM stops everything it started, and nothing else.
#
# Variables: SWARMGATE_CONFIG_FILE (a config of your own: it moves the
# gateway's ports, the relays and Redis; no mock relays are started for it
# unless SWARMGATE_RUN_MOCKS=1), SWARMGATE_ENVOY_ADMIN (Envoy's admin
# listener, default 127.0.0.1:9901), ENVOY_BIN, SWARMGATE_RUN_DIR (logs and
# state, default .run).
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${SWARMGATE_BIN:-bin/swarmgate}
mkdir -p "${SWARMGATE_RUN_DIR:-.run}"
state=$(cd "${SWARMGATE_RUN_DIR:-.run}" && pwd)
config=${SWARMGATE_CONFIG_FILE:-}
envoy_admin=${SWARMGATE_ENVOY_ADMIN:-127.0.0.1:9901}
mocks=${SWARMGATE_RUN_MOCKS:-$([ -z "$config" ] && echo 1 || echo 0)}

pids=()
redis_pidfile=
cleanup() {
  trap - EXIT INT TERM
  local p
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  if [ -n "$redis_pidfile" ] && [ -f "$redis_pidfile" ]; then
    kill "$(cat "$redis_pidfile")" 2>/dev/null || true
  fi
}
trap cleanup EXIT
trap 'echo "stopping"; exit 130' INT
trap 'exit 143' TERM

# in_use PORT: something accepts connections on 127.0.0.1:PORT.
in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
taken() {
  echo "make run: port $1 is already in use ($2). Stop what holds it, or move it: $3." >&2
  exit 1
}

# The embedded config's ports, checked before anything starts so a taken one
# is named with what moves it (a config of your own is checked by serve).
moveit="copy internal/config/default.yaml, change"
envoy_admin_port=${envoy_admin##*:}
in_use "$envoy_admin_port" && taken "$envoy_admin_port" "Envoy admin" "set SWARMGATE_ENVOY_ADMIN=127.0.0.1:PORT"
if [ -z "$config" ]; then
  for spec in 18000:listen.xds 18001:listen.extproc 18002:listen.ratelimit 19000:listen.admin \
    10000:envoy.listener_port 18101:"backends[relay-a].base_url" 18102:"backends[relay-b].base_url"; do
    port=${spec%%:*} field=${spec#*:}
    in_use "$port" && taken "$port" "$field" "$moveit $field and run SWARMGATE_CONFIG_FILE=your.yaml SWARMGATE_RUN_MOCKS=1 make run"
  done
fi

# The addresses the config listens on (a config of your own may move them):
# dialled on loopback when the config binds every interface.
xds=127.0.0.1:18000 extproc=127.0.0.1:18001 ratelimit=127.0.0.1:18002 admin=127.0.0.1:19000 listener_port=10000
if [ -n "$config" ]; then
  if ! addrs=$("$bin" validate --skip-secrets --print listen.xds,listen.extproc,listen.ratelimit,listen.admin,envoy.listener_port "$config"); then
    echo "make run: $config is not a valid config (above)" >&2
    exit 1
  fi
  { read -r xds; read -r extproc; read -r ratelimit; read -r admin; read -r listener_port; } <<<"$addrs"
fi
local_addr() {
  local host=${1%:*} port=${1##*:}
  case $host in ""|0.0.0.0|"[::]"|"::") host=127.0.0.1 ;; esac
  echo "$host:$port"
}
admin_url=http://$(local_addr "$admin")

redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping 2>/dev/null | grep -q PONG; }
if [ -z "$config" ] || grep -q '127.0.0.1:6379' "$config"; then
  if redis_up; then
    echo "using the Redis already running on 127.0.0.1:6379 (make run did not start it and will not stop it)"
  elif in_use 6379; then
    taken 6379 "redis.addrs, and it is not answering as Redis" "$moveit redis.addrs and run SWARMGATE_CONFIG_FILE=your.yaml make run"
  else
    echo "starting redis-server on 127.0.0.1:6379 (data in $state/)"
    redis_pidfile="$state/redis.pid"
    redis-server --port 6379 --bind 127.0.0.1 --dir "$state" --save "" --daemonize yes \
      --logfile "$state/redis.log" --pidfile "$redis_pidfile"
    for _ in $(seq 50); do redis_up && break; sleep 0.1; done
    redis_up || { echo "redis-server did not start; see $state/redis.log" >&2; exit 1; }
  fi
fi

# Demo credentials for the mock relays (the embedded config reads them from
# these variables; real deployments set their own or use file: references).
export SWARMGATE_DEMO_KEY_A1=${SWARMGATE_DEMO_KEY_A1:-sk-demo-relay-a-1}
export SWARMGATE_DEMO_KEY_A2=${SWARMGATE_DEMO_KEY_A2:-sk-demo-relay-a-2}
export SWARMGATE_DEMO_KEY_B1=${SWARMGATE_DEMO_KEY_B1:-sk-demo-relay-b-1}

if [ "$mocks" = 1 ]; then
  # Each mock relay takes its address, auth style and keys from the config.
  for relay in relay-a relay-b; do
    "$bin" mock-upstream --config "${config:-internal/config/default.yaml}" --backend "$relay" >"$state/$relay.log" 2>&1 &
    pids+=($!)
  done
fi

# Envoy 1.38 is the minimum the data path relies on (docs/envoy-behaviour.md).
envoy_bin=${ENVOY_BIN:-$(command -v envoy || true)}
[ -n "$envoy_bin" ] || envoy_bin=$(scripts/envoy.sh path NEW)
ver=$("$envoy_bin" --version 2>/dev/null | grep -oE '/[0-9]+\.[0-9]+\.[0-9]+/' | tr -d / | head -n1 || true)
major=${ver%%.*}; rest=${ver#*.}; minor=${rest%%.*}
if [ -z "$ver" ] || [ "$major" -lt 1 ] || { [ "$major" -eq 1 ] && [ "$minor" -lt 38 ]; }; then
  echo "$envoy_bin is Envoy ${ver:-of unknown version}; swarmgate needs 1.38 or newer" >&2
  exit 1
fi

cfgflag=()
[ -n "$config" ] && cfgflag=(--config-file "$config")
"$bin" serve "${cfgflag[@]}" "$@" &
pids+=($!)
serve_pid=$!
for _ in $(seq 150); do
  curl -sf "$admin_url/readyz" >/dev/null 2>&1 && break
  kill -0 "$serve_pid" 2>/dev/null || { echo "swarmgate serve exited; see its log above" >&2; exit 1; }
  sleep 0.1
done
"$bin" bootstrap "${cfgflag[@]}" --node-id envoy-1 --envoy-admin "$envoy_admin" >"$state/envoy.yaml"
echo "starting Envoy $ver ($envoy_bin) on 127.0.0.1:$listener_port, admin $envoy_admin, log in $state/envoy.log"
"$envoy_bin" -c "$state/envoy.yaml" --log-level warn --disable-hot-restart >"$state/envoy.log" 2>&1 &
pids+=($!)
for _ in $(seq 100); do
  curl -sf "http://$envoy_admin/ready" >/dev/null 2>&1 && break
  sleep 0.1
done

cat <<MSG
swarmgate: control plane $xds (ADS), ext_proc $extproc, rate limits $ratelimit,
admin and status page $admin_url/ (usage: $admin_url/usage). Ctrl-C stops everything make run started.
Then call it:        curl -s localhost:$listener_port/v1/chat/completions -H 'Authorization: Bearer sk-swarmgate-demo' \\
                       -H 'Content-Type: application/json' \\
                       -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}'
MSG
# Stop as soon as any part stops (a crash, or a signal to it).
wait -n "${pids[@]}"
