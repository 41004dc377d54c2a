#!/usr/bin/env bash
# Installs what swarmgate's tests and `make run` need besides Go: redis-server
# (Debian package), chromium for the status-page test, the pinned Envoy
# releases (scripts/envoy.sh), and for the tests the pinned agent CLIs and
# Python SDKs (scripts/agents.sh, scripts/pyclients.sh). Idempotent; safe to
# run on every `make test`.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
if [ "${SWARMGATE_WITH_PROTOC:-0}" = 1 ]; then
	command -v protoc >/dev/null 2>&1 || need+=(protobuf-compiler)
	# The well-known types (google/protobuf/duration.proto, ...) protos/ imports.
	[ -f /usr/include/google/protobuf/duration.proto ] || need+=(libprotobuf-dev)
fi
# Headless Chromium drives the admin status-page test; `make run` skips it.
if [ "${SWARMGATE_NO_CHROMIUM:-0}" != 1 ]; then command -v chromium >/dev/null 2>&1 || need+=(chromium); fi
if [ ${#need[@]} -gt 0 ]; then
	if [ "$(id -u)" != 0 ]; then SUDO=sudo; else SUDO=; fi
	echo "installing: ${need[*]}" >&2
	$SUDO apt-get update -qq
	DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
scripts/envoy.sh install
# Test clients (Claude Code, Codex, the Python SDKs); `make run` skips them.
if [ "${SWARMGATE_NO_CHROMIUM:-0}" != 1 ]; then
	scripts/agents.sh
	scripts/pyclients.sh
fi
