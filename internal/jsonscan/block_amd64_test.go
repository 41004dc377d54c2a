//go:build !purego

package jsonscan

func classifiers() map[string]func([]byte, []block) {
	m := map[string]func([]byte, []block){
		"swar": classifySWAR,
		"sse2": func(src []byte, dst []block) { classifySSE2(&src[0], &dst[0], len(dst)) },
	}
	if hasAVX2 {
		m["avx2"] = func(src []byte, dst []block) { classifyAVX2(&src[0], &dst[0], len(dst)) }
	}
	return m
}
