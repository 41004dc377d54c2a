#!/usr/bin/env bash
# `make proto`: regenerates protos/ Go code with the protoc-gen-go go.mod pins.
set -euo pipefail
cd "$(dirname "$0")/.."
ver=$(go list -m -f '{{.Version}}' google.golang.org/protobuf)
gen="$(go env GOPATH)/bin/protoc-gen-go"
if ! "$gen" --version 2>/dev/null | grep -q "${ver#v}"; then
  go install "google.golang.org/protobuf/cmd/protoc-gen-go@${ver}"
fi
./protos/gen.sh
