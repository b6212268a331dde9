//go:build !amd64 || purego

package averaging

// mixVec: no vector loop here; mixScalar does every value.
func mixVec(dst, src []float32, a float32) int { return 0 }

// subVec: no vector loop here; subScalar does every value.
func subVec(dst, a, b []float32) int { return 0 }

// addVec: no vector loop here; addScalar does every value.
func addVec(dst, src []float32) int { return 0 }

// sumSqVec: no vector loop here; sumSq's Go loop does every value.
func sumSqVec(s *[sumLanes]float64, a, b []float32) int { return 0 }
