package main

import (
	"context"
	"fmt"
	"runtime"

	"github.com/meshtrain/meshtrain/node"
)

func runVersion(_ context.Context, e *env, args []string) int {
	fs := newFlags(e, "")
	if code, ok := parse(e, fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(e, "unexpected argument %q", fs.Arg(0))
	}
	fmt.Fprintf(e.stdout, "meshtrain %s (%s, %s/%s)\n", node.Version(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return exitOK
}
