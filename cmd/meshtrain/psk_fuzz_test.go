package main

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzReadPSK writes arbitrary bytes as a --psk key file and reads it. The
// reader must not panic; a refusal names the flag; an accepted key is 32
// bytes from a file within the size limit, and written back as keygen
// writes keys it reads as the same key.
func FuzzReadPSK(f *testing.F) {
	good, err := newPSK()
	if err != nil {
		f.Fatal(err)
	}
	key := bytes.Repeat([]byte{0xab}, 32)
	for _, b := range [][]byte{
		good,
		[]byte(pskHeader + hex.EncodeToString(key)), // no final newline
		[]byte("/key/swarm/psk/1.0.0/\n/base64/\n" + base64.StdEncoding.EncodeToString(key) + "\n"),
		append([]byte("/key/swarm/psk/1.0.0/\n/bin/\n"), key...),
		[]byte(pskHeader + hex.EncodeToString(key[:31]) + "\n"), // short
		[]byte(pskHeader + strings.Repeat("zz", 32) + "\n"),     // not hex
		[]byte("/key/swarm/psk/1.0.0/\n/base32/\n" + hex.EncodeToString(key) + "\n"),
		append(bytes.Clone(good), bytes.Repeat([]byte{'\n'}, maxPSKFile)...), // too large
		[]byte("/key/swarm/psk/2.0.0/\n"),
		{},
	} {
		f.Add(b)
	}
	path := filepath.Join(f.TempDir(), "mesh.key")
	f.Fuzz(func(t *testing.T, b []byte) {
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		k, err := readPSK(path)
		if err != nil {
			if k != nil || !strings.Contains(err.Error(), "--psk") {
				t.Fatalf("refused with key %x and error %v", k, err)
			}
			return
		}
		if len(k) != 32 || len(b) > maxPSKFile {
			t.Fatalf("accepted a %d-byte key from a %d-byte file", len(k), len(b))
		}
		if err := os.WriteFile(path, []byte(pskHeader+hex.EncodeToString(k)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if again, err := readPSK(path); err != nil || !bytes.Equal(again, k) {
			t.Fatalf("key %x written back reads as %x, %v", []byte(k), []byte(again), err)
		}
	})
}
