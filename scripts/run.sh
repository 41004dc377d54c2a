#!/usr/bin/env bash
# `make run`: the gateway on its embedded default config, on one machine.
# Starts (if needed) a local redis-server and the two mock relays the default
# config points at, then runs `swarmgate serve`; with an Envoy on PATH (or
# ENVOY_BIN) it starts that too and prints a request that works against it.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${SWARMGATE_BIN:-bin/swarmgate}
state=${SWARMGATE_RUN_DIR:-.run}
mkdir -p "$state"

redis_up() { redis-cli -h 127.0.0.1 -p 6379 ping >/dev/null 2>&1; }
if ! redis_up; then
  echo "starting redis-server on 127.0.0.1:6379 (data in $state/)"
  redis-server --port 6379 --bind 127.0.0.1 --dir "$state" --save "" --daemonize yes \
    --logfile "$PWD/$state/redis.log" --pidfile "$PWD/$state/redis.pid"
  for _ in $(seq 50); do redis_up && break; sleep 0.1; done
  redis_up || { echo "redis-server did not start; see $state/redis.log" >&2; exit 1; }
fi

# Demo credentials for the mock relays (the embedded config reads them from
# these variables; real deployments set their own or use file: references).
export SWARMGATE_DEMO_KEY_A1=${SWARMGATE_DEMO_KEY_A1:-sk-demo-relay-a-1}
export SWARMGATE_DEMO_KEY_A2=${SWARMGATE_DEMO_KEY_A2:-sk-demo-relay-a-2}
export SWARMGATE_DEMO_KEY_B1=${SWARMGATE_DEMO_KEY_B1:-sk-demo-relay-b-1}

pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT INT TERM
# Each mock relay takes its address, auth style and keys from the config.
for relay in relay-a relay-b; do
  "$bin" mock-upstream --config config/default.yaml --backend "$relay" >"$state/$relay.log" 2>&1 &
  pids+=($!)
done

# An Envoy on PATH (or ENVOY_BIN) is started too, bootstrapped from the
# control plane; without one, say how to point an Envoy at it.
envoy_bin=${ENVOY_BIN:-$(command -v envoy || true)}
curl_hint() {
  cat <<MSG
Then call it:        curl -s localhost:10000/v1/chat/completions -H 'Authorization: Bearer sk-swarmgate-demo' \\
                       -H 'Content-Type: application/json' \\
                       -d '{"model":"gpt-4o-mini","messages":[{"role":"user","content":"hi"}]}'
MSG
}
cat <<MSG
swarmgate: control plane on 127.0.0.1:18000 (ADS), ext_proc 127.0.0.1:18001, rate limits 127.0.0.1:18002,
admin and status page http://127.0.0.1:19000/
MSG
if [ -z "$envoy_bin" ]; then
  echo "Point Envoy (1.38 or newer) at it:   $bin bootstrap --node-id envoy-1 > envoy.yaml && envoy -c envoy.yaml"
  curl_hint
  exec "$bin" serve "$@"
fi

# Envoy 1.38 is the minimum the data path relies on (docs/envoy-behaviour.md).
ver=$("$envoy_bin" --version 2>/dev/null | grep -oE '[0-9]+\.[0-9]+\.[0-9]+' | head -n1 || true)
major=${ver%%.*}; rest=${ver#*.}; minor=${rest%%.*}
if [ -z "$ver" ] || [ "$major" -lt 1 ] || { [ "$major" -eq 1 ] && [ "$minor" -lt 38 ]; }; then
  echo "$envoy_bin is Envoy ${ver:-of unknown version}; swarmgate needs 1.38 or newer" >&2
  exit 1
fi
"$bin" serve "$@" &
pids+=($!)
for _ in $(seq 100); do curl -sf http://127.0.0.1:19000/readyz >/dev/null 2>&1 && break; sleep 0.1; done
"$bin" bootstrap --node-id envoy-1 >"$state/envoy.yaml"
echo "starting Envoy $ver ($envoy_bin) on 127.0.0.1:10000, admin 127.0.0.1:9901, log in $state/envoy.log"
"$envoy_bin" -c "$state/envoy.yaml" --log-level warn >"$state/envoy.log" 2>&1 &
pids+=($!)
curl_hint
wait -n "${pids[@]}"
