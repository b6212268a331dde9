package gossip

// addTo sets dst[i] += src[i] for every i < len(dst), len(src) >= len(dst):
// the all-reduce's summation of a scattered segment. On amd64 with AVX it
// adds eight values per instruction (float32 addition, the same bits as
// Go's); the tail, and every value elsewhere, in Go.
func addTo(dst, src []float32) {
	if len(dst) == 0 {
		return
	}
	_ = src[len(dst)-1]
	if n := len(dst) &^ 7; n > 0 && useAddAVX {
		addAVX(&dst[0], &src[0], n)
		dst, src = dst[n:], src[n:]
	}
	addToGo(dst, src)
}

// addToGo is addTo in portable Go.
func addToGo(dst, src []float32) {
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] += v
	}
}
