//go:build !amd64 || purego

package chatreq

func classifiers() map[string]func(*[64]byte, *block) {
	return map[string]func(*[64]byte, *block){"swar": classifySWAR}
}
