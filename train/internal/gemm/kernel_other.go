//go:build !amd64 || purego

package gemm

var kernels = [...]microKernel{
	levelGeneric: {genericMR, genericNR, kernelGeneric},
}

func detectLevel() int { return levelGeneric }

func transpose16(src []float32, ld, kc int, dst []float32) bool { return false }

func copy16(src []float32, ld, kc int, dst []float32) bool { return false }
