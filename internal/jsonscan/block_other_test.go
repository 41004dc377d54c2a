//go:build !amd64 || purego

package jsonscan

func classifiers() map[string]func([]byte, []block) {
	return map[string]func([]byte, []block){"swar": classifySWAR}
}
