//go:build !purego

package chatreq

// classifySSE2 is classifySWAR with SSE2 (part of every amd64 CPU), 16
// bytes per instruction; it sets every mask of bl but not bl.k.
//
//go:noescape
func classifySSE2(p *[64]byte, bl *block)

func classify(p *[64]byte, bl *block) { classifySSE2(p, bl) }
