#!/usr/bin/env bash
# Load test: swarmgate's ext_proc (router-level + upstream-level streams)
# against the do-nothing baseline, same load generator, same run.
# Writes test/bench/results/*.json, *.svg and summary.md.
#
#   test/bench/run.sh                 # 15 s per point after 3 s warm-up
#   DURATION=10s ROUNDS=2 test/bench/run.sh
#
# Every server listens on 127.0.0.1 only; every point is bounded in time.
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=test/bench/results
DURATION=${DURATION:-15s}
WARMUP=${WARMUP:-3s}
ROUNDS=${ROUNDS:-1}
mkdir -p "$OUT"
go build -o "$OUT/loadgen" ./test/bench/loadgen/cmd/loadgen
LG="$OUT/loadgen"

point() { # target kind streams round name-suffix [extra flags...]
	local t=$1 k=$2 n=$3 r=$4 suffix=$5
	shift 5
	"$LG" run --target "$t" --kind "$k" --streams "$n" --warmup "$WARMUP" --duration "$DURATION" \
		-o "$OUT/$t-$k-$n$suffix-r$r.json" "$@"
}

# One short untimed point per server first: the first point of a run was
# consistently the slowest (cold page cache, CPU frequency), whichever
# server ran it.
for t in baseline swarmgate; do
	"$LG" run --target "$t" --kind json --streams 64 --warmup 1s --duration 4s -o /dev/null >/dev/null
done

for r in $(seq 1 "$ROUNDS"); do
	for k in json sse; do
		for n in 64 1000; do
			# Alternate the order between rounds so drift of the shared
			# machine's load does not always favour the same side.
			if ((r % 2)); then order="baseline swarmgate"; else order="swarmgate baseline"; fi
			for t in $order; do point "$t" "$k" "$n" "$r" ""; done
		done
	done
	# 1,000 streams paced like token streaming (100 ms between SSE
	# chunks): below saturation, so latency is the servers' own, not
	# queueing.
	for t in $order; do point "$t" sse 1000 "$r" -paced --chunk-interval 100ms; done
done

# Memory: 2,000 streams in flight (SSE, 20 ms between chunks, as an
# upstream streaming tokens); peak RSS is the server's VmHWM.
for t in baseline swarmgate; do
	point "$t" sse 2000 1 "" --chunk-interval 20ms
done

# Once with the ledger writing every request to a real Redis.
if command -v redis-server >/dev/null; then
	port=$((20000 + RANDOM % 20000))
	redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no --daemonize no >"$OUT/redis.log" 2>&1 &
	rpid=$!
	trap 'kill "$rpid" 2>/dev/null || true' EXIT
	for _ in $(seq 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
	"$LG" run --target swarmgate --kind sse --streams 64 --warmup "$WARMUP" --duration "$DURATION" \
		--redis "127.0.0.1:$port" -o "$OUT/swarmgate+redis-sse-64-r1.json"
	kill "$rpid"
	wait "$rpid" 2>/dev/null || true
	trap - EXIT
fi

for k in json sse; do
	for n in 64 1000; do
		"$LG" chart -o "$OUT/latency-$k-$n.svg" --title "ext_proc latency, $k responses, $n streams: swarmgate vs do-nothing baseline" \
			"$OUT/baseline-$k-$n-r1.json" "$OUT/swarmgate-$k-$n-r1.json" >/dev/null
	done
done
"$LG" chart -o "$OUT/latency-sse-64-1000.svg" --title "ext_proc latency, SSE: swarmgate vs do-nothing baseline" \
	"$OUT/baseline-sse-64-r1.json" "$OUT/swarmgate-sse-64-r1.json" "$OUT/baseline-sse-1000-r1.json" "$OUT/swarmgate-sse-1000-r1.json" >/dev/null
# shellcheck disable=SC2046
"$LG" chart -o "$OUT/all.svg" $(ls "$OUT"/*-r*.json) >"$OUT/summary.md"
cat "$OUT/summary.md"
