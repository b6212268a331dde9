//go:build linux

package node

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// startRecheck is how often waitForFile looks for the file without being
// told: a safety net for a watch that was lost (its directory removed and
// made again), cheap at once a second.
const startRecheck = time.Second

// waitForFile returns once path exists or ctx ends. It sleeps on an
// inotify watch of the file's directory instead of polling: a node held
// at a testnet's start gate would otherwise wake 200 times a second,
// which costs about 5% of a core on a small virtual machine and saturates
// it with a hundred nodes. Where inotify is unavailable it polls.
func waitForFile(ctx context.Context, path string) {
	fd, err := syscall.InotifyInit1(syscall.IN_NONBLOCK | syscall.IN_CLOEXEC)
	if err != nil {
		pollForFile(ctx, path)
		return
	}
	// A non-blocking descriptor goes to the runtime's poller, so a read
	// deadline can end a wait (never call f.Fd: it makes it blocking).
	f := os.NewFile(uintptr(fd), "inotify")
	defer f.Close()
	const mask = syscall.IN_CREATE | syscall.IN_MOVED_TO | syscall.IN_CLOSE_WRITE | syscall.IN_ATTRIB
	dir := filepath.Dir(path)
	if _, err := syscall.InotifyAddWatch(fd, dir, mask); err != nil {
		pollForFile(ctx, path)
		return
	}
	stop := context.AfterFunc(ctx, func() { _ = f.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	buf := make([]byte, 4096)
	for {
		// Looked for after the watch is in place, so a file made in
		// between is never missed.
		if _, err := os.Stat(path); err == nil || ctx.Err() != nil {
			return
		}
		if err := f.SetReadDeadline(time.Now().Add(startRecheck)); err != nil {
			pollForFile(ctx, path)
			return
		}
		if ctx.Err() != nil {
			return // the stop's deadline may have come before ours
		}
		if _, err := f.Read(buf); err != nil {
			if !errors.Is(err, os.ErrDeadlineExceeded) {
				pollForFile(ctx, path)
				return
			}
			// Renew the watch in case its directory was replaced.
			_, _ = syscall.InotifyAddWatch(fd, dir, mask)
		}
	}
}
