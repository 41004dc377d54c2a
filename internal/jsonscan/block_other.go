//go:build !amd64 || purego

package jsonscan

func classify(src []byte, dst []block) { classifySWAR(src, dst) }
