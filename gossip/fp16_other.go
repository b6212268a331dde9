//go:build !amd64 || purego

package gossip

const useF16C = false

func encodeF16C(dst []byte, src []float32) bool { panic("gossip: no F16C") }

func decodeF16C(dst []float32, src []byte) bool { panic("gossip: no F16C") }
