#!/usr/bin/env bash
# Installs the pinned official Python SDKs the end-to-end tests use as clients
# (test/e2e-envoy/python_test.go) into a project-local virtualenv.
# Idempotent: a venv holding the pinned versions is kept.
#
#   scripts/pyclients.sh          install
#   scripts/pyclients.sh python   print the venv's python
#
# PYCLIENTS_CACHE moves the venv (default: .cache/py under the checkout).
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${PYCLIENTS_CACHE:-$PWD/.cache/py}

OPENAI_VERSION=3.63.0
ANTHROPIC_VERSION=2.17.0

mkdir -p "$(dirname "$venv")"
exec 9>"$venv.lock"
flock 9

install() {
  local stamp="$venv/.pinned"
  local want="openai==$OPENAI_VERSION anthropic==$ANTHROPIC_VERSION"
  [ -x "$venv/bin/python" ] && [ "$(cat "$stamp" 2>/dev/null)" = "$want" ] && return 0
  echo "installing $want into $venv" >&2
  python3 -m venv --clear "$venv" >&2
  # shellcheck disable=SC2086
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check $want >&2
  echo "$want" >"$stamp"
}

case "${1:-install}" in
install) install ;;
python) echo "$venv/bin/python" ;;
*) echo "usage: $0 [install|python]" >&2; exit 2 ;;
esac
