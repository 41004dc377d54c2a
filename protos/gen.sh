#!/usr/bin/env bash
# Regenerates the Go code of protos/ (committed). Needs protoc (apt
# protobuf-compiler) and protoc-gen-go at the version go.mod pins:
#   go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
set -euo pipefail
cd "$(dirname "$0")"
PATH="$(go env GOPATH)/bin:$PATH"
protoc --proto_path=. --go_out=. --go_opt=paths=source_relative swarmgate/v1/*.proto
