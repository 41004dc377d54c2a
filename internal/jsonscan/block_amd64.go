//go:build !purego

package jsonscan

import "golang.org/x/sys/cpu"

// classifySSE2 is classifySWAR with SSE2 (part of every amd64 CPU), 16
// bytes per instruction, for the n blocks at src.
//
//go:noescape
func classifySSE2(src *byte, dst *block, n int)

// classifyAVX2 is classifySSE2 with AVX2, 32 bytes per instruction.
//
//go:noescape
func classifyAVX2(src *byte, dst *block, n int)

// hasAVX2 is read once; the CPU does not change under the process.
var hasAVX2 = cpu.X86.HasAVX2

// classify classifies the 64-byte blocks of src (len(src) == 64*len(dst)).
func classify(src []byte, dst []block) {
	if len(src) != len(dst)<<6 {
		panic("jsonscan: classify: source is not 64 bytes per block") // the assembly would read past it
	}
	if len(dst) == 0 {
		return
	}
	if hasAVX2 {
		classifyAVX2(&src[0], &dst[0], len(dst))
		return
	}
	classifySSE2(&src[0], &dst[0], len(dst))
}
