//go:build !amd64 || purego

package chatreq

func classify(p *[64]byte, bl *block) { classifySWAR(p, bl) }
