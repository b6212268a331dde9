//go:build !amd64 || purego

package train

// sgdUpdateVec: no vector loop here; the scalar one does every value.
func sgdUpdateVec(w, mom, grad []float32, mu, wd, eta float32) int { return 0 }
