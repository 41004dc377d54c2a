//go:build race

package loadgen

// smokeRequests is lower under the race detector (about 10x slower).
const smokeRequests = 80
