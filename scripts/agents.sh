#!/usr/bin/env bash
# Installs the pinned agent CLIs the end-to-end tests drive through the real
# Envoy (test/e2e-envoy/agents_test.go): Claude Code and Codex from npm, into
# a project-local prefix. Idempotent: the installed versions are kept.
#
#   scripts/agents.sh            install both
#   scripts/agents.sh bin NAME   print the path of `claude` or `codex`
#
# AGENTS_CACHE moves the prefix (default: .cache/npm under the checkout).
set -euo pipefail
cd "$(dirname "$0")/.."
prefix=${AGENTS_CACHE:-$PWD/.cache/npm}

CLAUDE_CODE_VERSION=2.1.332
CODEX_VERSION=0.171.0

mkdir -p "$prefix"
exec 9>"$prefix/.lock"
flock 9

installed() { # package version
  local pj="$prefix/lib/node_modules/$1/package.json"
  [ -f "$pj" ] && grep -q "\"version\": *\"$2\"" "$pj"
}

install() {
  command -v npm >/dev/null 2>&1 || { echo "npm is needed to install the agent CLIs (apt-get install nodejs npm)" >&2; exit 1; }
  local want=()
  installed @anthropic-ai/claude-code "$CLAUDE_CODE_VERSION" || want+=("@anthropic-ai/claude-code@$CLAUDE_CODE_VERSION")
  installed @openai/codex "$CODEX_VERSION" || want+=("@openai/codex@$CODEX_VERSION")
  [ ${#want[@]} -eq 0 ] && return 0
  echo "installing ${want[*]} into $prefix" >&2
  # --cache keeps npm's own cache inside the prefix too; no audit, no fund
  # notices, nothing written to the user's ~/.npmrc.
  npm install --global --prefix "$prefix" --cache "$prefix/.npm-cache" \
    --no-audit --no-fund --loglevel=error "${want[@]}" >&2
}

case "${1:-install}" in
install) install ;;
bin)
  case "${2:-}" in
  claude | codex) echo "$prefix/bin/$2" ;;
  *) echo "usage: $0 bin claude|codex" >&2; exit 2 ;;
  esac
  ;;
versions) echo "claude-code $CLAUDE_CODE_VERSION codex $CODEX_VERSION" ;;
*) echo "usage: $0 [install|bin NAME|versions]" >&2; exit 2 ;;
esac
