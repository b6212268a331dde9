//go:build !amd64 || purego

package train

// pixVec: no vector loop here; scalePixGo does every value.
func pixVec(dst []float32, pix []uint8) int { return 0 }
