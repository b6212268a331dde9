//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lockName is the lock file in the data dir. It is never removed: removing
// a flock'ed file lets a second process lock a new inode under the same
// name while the first still runs.
const lockName = "meshtrain.lock"

// lockDir takes an exclusive flock on the data dir's lock file and writes
// our pid into it, so a second process is refused with a message naming
// the holder. The kernel drops the lock when the process dies, however it
// dies, so a crash never leaves the dir locked.
func lockDir(dir string) (unlock func() error, err error) {
	path := filepath.Join(dir, lockName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: open lock file: %w", err)
	}
	fd := int(f.Fd())
	if err := syscall.Flock(fd, syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := io.ReadAll(io.LimitReader(f, 32))
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
			return nil, &LockedError{Dir: dir, PID: pid}
		}
		return nil, fmt.Errorf("store: lock %s: %w", path, err)
	}
	err = f.Truncate(0)
	if err == nil {
		_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("store: write lock file: %w", err)
	}
	return func() error {
		// Closing the file releases the flock.
		return f.Close()
	}, nil
}
