package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/pnet"

	"github.com/meshtrain/meshtrain/node"
)

// pskHeader starts a private network key file in the go-libp2p (and IPFS
// swarm.key) format; the 32-byte key follows in hex on the next line.
const pskHeader = "/key/swarm/psk/1.0.0/\n/base16/\n"

// maxPSKFile bounds the key file read: the format is under 100 bytes.
const maxPSKFile = 4096

func runKeygen(_ context.Context, e *env, args []string) int {
	fs := newFlags(e, "--psk FILE [--force] | --data-dir DIR")
	var sf storeFlags
	var lf logFlags
	fs.StringVar(&sf.dir, "data-dir", "", "create the node identity in this data dir if it has none, and print its peer ID")
	lf.register(fs)
	psk := fs.String("psk", "", "write a new private network key to FILE (give a copy to every node of the mesh: meshtrain node --psk FILE)")
	force := fs.Bool("force", false, "with --psk: replace an existing key file")
	if code, ok := parse(e, fs, args); !ok {
		return code
	}
	if fs.NArg() > 0 {
		return usageError(e, "unexpected argument %q", fs.Arg(0))
	}
	identity := sf.dir != ""
	switch {
	case *psk == "" && !identity:
		return usageError(e, "say what to make: --psk FILE (a private network key) or --data-dir DIR (a node identity)")
	case *force && *psk == "":
		return usageError(e, "--force applies to --psk only")
	}
	log, err := lf.logger(e.stderr)
	if err != nil {
		return usageError(e, "%v", err)
	}
	if *psk != "" {
		if err := writePSK(*psk, *force); err != nil {
			return failure(e, err)
		}
		fmt.Fprintf(e.stdout, "wrote a private network key to %s (keep it secret)\n", *psk)
		fmt.Fprintf(e.stdout, "start every node of the mesh with --psk %s (its own copy of this file)\n", *psk)
	}
	if !identity {
		return exitOK
	}
	st, err := sf.open(log)
	if err != nil {
		return failure(e, err)
	}
	defer st.Close()
	_, id, created, err := node.Identity(st)
	if err != nil {
		return failure(e, err)
	}
	if created {
		fmt.Fprintf(e.stdout, "created a new identity in %s: peer ID %s\n", sf.dir, id)
	} else {
		fmt.Fprintf(e.stdout, "%s already has an identity; kept it: peer ID %s\n", sf.dir, id)
	}
	return exitOK
}

// newPSK returns a new random key in the key file format.
func newPSK() ([]byte, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("random key: %w", err)
	}
	return []byte(pskHeader + hex.EncodeToString(k) + "\n"), nil
}

// writePSK writes a new key to path, readable by its owner only. Without
// force an existing file is left alone: replacing a mesh's key cuts off
// every node that still has the old one.
func writePSK(path string, force bool) error {
	b, err := newPSK()
	if err != nil {
		return err
	}
	if !force {
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("%s exists: pass --force to replace it (every node then needs the new key)", path)
		}
		if err != nil {
			return err
		}
		if _, err := f.Write(b); err != nil {
			f.Close()
			os.Remove(path)
			return fmt.Errorf("write %s: %w", path, err)
		}
		if err := f.Close(); err != nil {
			os.Remove(path)
			return fmt.Errorf("write %s: %w", path, err)
		}
		return nil
	}
	// Replace atomically: a reader sees the old key or the new one, and
	// the new file is 0600 whatever the mode of the old one was.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".meshtrain-psk-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := tmp.Chmod(0o600); err != nil {
		tmp.Close()
		return err
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return os.Rename(tmp.Name(), path)
}

// readPSK reads a private network key file (meshtrain keygen --psk, or an
// IPFS swarm.key).
func readPSK(path string) (pnet.PSK, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("--psk: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxPSKFile+1))
	if err != nil {
		return nil, fmt.Errorf("--psk %s: %w", path, err)
	}
	if len(b) > maxPSKFile {
		return nil, fmt.Errorf("--psk %s: not a private network key (larger than %d bytes)", path, maxPSKFile)
	}
	k, err := pnet.DecodeV1PSK(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("--psk %s: not a private network key (make one with meshtrain keygen --psk FILE): %v", path, err)
	}
	return k, nil
}
