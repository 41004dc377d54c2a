//go:build !purego

package chatreq

import "golang.org/x/sys/cpu"

// classifySSE2 is classifySWAR with SSE2 (part of every amd64 CPU), 16
// bytes per instruction; it sets every mask of bl but not bl.k.
//
//go:noescape
func classifySSE2(p *[64]byte, bl *block)

// classifyAVX2 is classifySSE2 with AVX2, 32 bytes per instruction.
//
//go:noescape
func classifyAVX2(p *[64]byte, bl *block)

// hasAVX2 is read once; the CPU does not change under the process.
var hasAVX2 = cpu.X86.HasAVX2

func classify(p *[64]byte, bl *block) {
	if hasAVX2 {
		classifyAVX2(p, bl)
		return
	}
	classifySSE2(p, bl)
}
