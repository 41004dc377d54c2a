//go:build !purego

package chatreq

func classifiers() map[string]func(*[64]byte, *block) {
	m := map[string]func(*[64]byte, *block){"swar": classifySWAR, "sse2": classifySSE2}
	if hasAVX2 {
		m["avx2"] = classifyAVX2
	}
	return m
}
