//go:build !amd64 || purego

package chatreq

func classify(src []byte, dst []block) { classifySWAR(src, dst) }
