package params

import "unsafe"

// CheckFinite returns ErrNonFinite if any element of v is NaN or ±Inf.
func CheckFinite(v []float32) error {
	if !AllFinite(v) {
		return ErrNonFinite
	}
	return nil
}

// AllFinite reports whether v holds no NaN or ±Inf. It tests two floats
// per 64-bit word: a float is non-finite exactly when its exponent field
// is all ones, and adding one to an all-ones exponent (and only then)
// carries into the float's sign bit position, with no carry across the two
// halves. This runs about 3x faster than a compare per element
// (BenchmarkCheckFinite), which matters because both ends of every transfer
// and every merge check every parameter.
func AllFinite(v []float32) bool {
	const (
		expMask = 0x7f800000_7f800000
		expOne  = 0x00800000_00800000
		carry   = 0x80000000_80000000
	)
	// Peel to an 8-byte boundary so the word loads are aligned everywhere.
	for len(v) > 0 && uintptr(unsafe.Pointer(unsafe.SliceData(v)))%8 != 0 {
		if v[0]-v[0] != 0 {
			return false
		}
		v = v[1:]
	}
	var words []uint64
	if len(v) >= 2 {
		words = unsafe.Slice((*uint64)(unsafe.Pointer(unsafe.SliceData(v))), len(v)/2)
	}
	var a0, a1, a2, a3 uint64
	for len(words) >= 4 {
		a0 |= words[0]&expMask + expOne
		a1 |= words[1]&expMask + expOne
		a2 |= words[2]&expMask + expOne
		a3 |= words[3]&expMask + expOne
		words = words[4:]
	}
	for _, w := range words {
		a0 |= w&expMask + expOne
	}
	if (a0|a1|a2|a3)&carry != 0 {
		return false
	}
	if len(v)%2 == 1 {
		x := v[len(v)-1]
		return x-x == 0
	}
	return true
}
