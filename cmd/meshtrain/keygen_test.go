package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/pnet"
)

func TestKeygenPSK(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "mesh.key")
	code, out, errOut := run(t, "keygen", "--psk", path)
	if code != exitOK {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(out, path) || !strings.Contains(out, "--psk "+path) {
		t.Errorf("output does not say where the key is and how to use it: %q", out)
	}
	first, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(string(first), "/key/swarm/psk/1.0.0/\n/base16/\n") || len(first) != len(pskHeader)+65 {
		t.Errorf("not a swarm key file: %q", first)
	}
	k, err := pnet.DecodeV1PSK(bytes.NewReader(first))
	if err != nil || len(k) != 32 {
		t.Fatalf("the key does not decode: %v", err)
	}
	if k2, err := readPSK(path); err != nil || !bytes.Equal(k, k2) {
		t.Fatalf("readPSK: %x, %v; want %x", k2, err, k)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600", st.Mode().Perm())
	}

	code, _, errOut = run(t, "keygen", "--psk", path)
	if code == exitOK || !strings.Contains(errOut, "--force") || strings.Count(errOut, "\n") != 1 {
		t.Errorf("second keygen without --force: exit %d, %q; want a one-line refusal", code, errOut)
	}
	if now, _ := os.ReadFile(path); !bytes.Equal(now, first) {
		t.Fatal("the existing key was changed without --force")
	}

	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := run(t, "keygen", "--psk", path, "--force"); code != exitOK {
		t.Fatalf("--force: exit %d: %s", code, errOut)
	}
	second, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(second, first) {
		t.Error("--force kept the old key")
	}
	if _, err := readPSK(path); err != nil {
		t.Errorf("replaced key: %v", err)
	}
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("replaced key: mode %v, %v; want 0600", st.Mode().Perm(), err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, ".meshtrain-psk-*")); len(left) > 0 {
		t.Errorf("temporary files left behind: %v", left)
	}
}

func TestKeygenIdentityMatchesID(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	code, out, errOut := run(t, "keygen", "--data-dir", dir)
	if code != exitOK || !strings.Contains(out, "created") {
		t.Fatalf("keygen --data-dir: exit %d, %q, %s", code, out, errOut)
	}
	code, id, errOut := run(t, "id", "--data-dir", dir)
	id = strings.TrimSpace(id)
	if code != exitOK || !strings.HasPrefix(id, "12D3KooW") {
		t.Fatalf("id: exit %d, %q, %s", code, id, errOut)
	}
	if !strings.Contains(out, id) {
		t.Errorf("keygen printed %q, id prints %s", out, id)
	}
	code, out, errOut = run(t, "keygen", "--data-dir", dir)
	if code != exitOK || !strings.Contains(out, "kept") || !strings.Contains(out, id) {
		t.Errorf("keygen on an existing identity: exit %d, %q, %s", code, out, errOut)
	}
}

func TestKeygenBadUsage(t *testing.T) {
	key := filepath.Join(t.TempDir(), "k")
	for _, args := range [][]string{
		{"keygen"},
		{"keygen", "--force"},
		{"keygen", "--psk"},
		{"keygen", "--bogus"},
		{"keygen", "extra"},
		{"keygen", "--psk", key, "extra"},
		{"keygen", "--psk", key, "--log-level", "loud"},
	} {
		code, out, errOut := run(t, args...)
		if code != exitUsage || strings.Count(errOut, "\n") != 1 || out != "" {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want exit 2 and one line", args, code, out, errOut)
		}
	}
	if _, err := os.Stat(key); err == nil {
		t.Error("a bad command line wrote a key")
	}
}

// TestNodePSKAndAllowPeersFlagErrors: a missing or malformed key file, QUIC
// with a key, and bad --allow-peers entries are usage errors on one line
// that name the file or entry, before anything starts.
func TestNodePSKAndAllowPeersFlagErrors(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.key")
	garbage := filepath.Join(dir, "garbage.key")
	if err := os.WriteFile(garbage, []byte("/key/swarm/psk/1.0.0/\n/base16/\nnot-hex\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.key")
	if code, _, errOut := run(t, "keygen", "--psk", good); code != exitOK {
		t.Fatalf("keygen: %s", errOut)
	}
	peers := filepath.Join(dir, "peers.txt")
	if err := os.WriteFile(peers, []byte("# mesh members\n12D3KooWBadBadBad\n\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	base := []string{"node", "--no-data-dir", "--api", "", "--dataset", "synthetic"}
	for _, c := range []struct {
		args []string
		want []string
	}{
		{[]string{"--psk", missing}, []string{missing}},
		{[]string{"--psk", garbage}, []string{garbage, "keygen --psk"}},
		{[]string{"--psk", good, "--listen", "/ip4/127.0.0.1/udp/0/quic-v1"}, []string{"quic-v1", "TCP only"}},
		{[]string{"--allow-peers", "12D3KooWnotapeer"}, []string{"12D3KooWnotapeer"}},
		{[]string{"--allow-peers", "@" + peers}, []string{peers, "line 2"}},
		{[]string{"--allow-peers", "@" + missing}, []string{missing}},
	} {
		code, out, errOut := run(t, append(base, c.args...)...)
		if code != exitUsage || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, stderr %q; want exit 2 and one line", c.args, code, errOut)
		}
		for _, w := range c.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%v: error does not name %q: %q", c.args, w, errOut)
			}
		}
		if out != "" {
			t.Errorf("%v: wrote to stdout: %q", c.args, out)
		}
	}
	// The variable reaches the flag like any other setting.
	t.Setenv("MESHTRAIN_PSK", missing)
	if code, _, errOut := run(t, base...); code != exitUsage || !strings.Contains(errOut, missing) {
		t.Errorf("MESHTRAIN_PSK: exit %d, %q", code, errOut)
	}
}

func TestReadAllowPeers(t *testing.T) {
	a, b, c := newPeerID(t), newPeerID(t), newPeerID(t)
	file := filepath.Join(t.TempDir(), "peers")
	if err := os.WriteFile(file, []byte("# members\n"+b+"\n\n  "+c+"  # the bootstrap node\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ids, err := readAllowPeers([]string{a, "@" + file})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, id := range ids {
		got = append(got, id.String())
	}
	if strings.Join(got, " ") != strings.Join([]string{a, b, c}, " ") {
		t.Errorf("got %v", got)
	}
	ids, err = readAllowPeers([]string{a + "," + b})
	if err != nil || len(ids) != 2 {
		t.Errorf("comma-separated: %v, %v", ids, err)
	}
	if ids, err := readAllowPeers(nil); err != nil || len(ids) != 0 {
		t.Errorf("none: %v, %v", ids, err)
	}
}

func newPeerID(t *testing.T) string {
	t.Helper()
	_, pub, err := crypto.GenerateKeyPair(crypto.Ed25519, -1)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id.String()
}
