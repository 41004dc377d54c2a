//go:build !race

package loadgen

// smokeRequests is how many requests each smoke case measures.
const smokeRequests = 300
