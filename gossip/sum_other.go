//go:build !amd64 || purego

package gossip

const useAddAVX = false

func addAVX(dst, src *float32, n int) { panic("gossip: no AVX") }
