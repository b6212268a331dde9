package params

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
)

// Fingerprint identifies what a parameter vector means: the architecture
// (layout), the dataset it is trained on, the network name and, for a
// swarm's run, the run (its length and schedule: see RunFingerprint). Two
// models may be merged only when their fingerprints are equal.
type Fingerprint [32]byte

// fingerprintVersion is hashed in so that a change of this recipe can never
// make two incompatible models look alike.
const fingerprintVersion = "meshtrain-fingerprint-v1"

// NewFingerprint hashes the layout's canonical form, the dataset and the
// network name, each length-prefixed so no two inputs collide by concatenation.
func NewFingerprint(l Layout, dataset, network string) Fingerprint {
	return RunFingerprint(l, dataset, network, "")
}

// RunFingerprint is NewFingerprint for one run of a swarm: run is the run's
// canonical description (its length and schedule), hashed in after the
// rest, so nodes of one network that disagree on when the run ends or on
// its schedule never merge. An empty run gives NewFingerprint's value.
func RunFingerprint(l Layout, dataset, network, run string) Fingerprint {
	h := sha256.New()
	parts := []string{fingerprintVersion, l.String(), dataset, network}
	if run != "" {
		parts = append(parts, "run", run)
	}
	for _, part := range parts {
		fmt.Fprintf(h, "%d:%s;", len(part), part)
	}
	var fp Fingerprint
	h.Sum(fp[:0])
	return fp
}

// String is the full lower-case hex form.
func (f Fingerprint) String() string { return hex.EncodeToString(f[:]) }

// Short is the first 12 hex digits, for logs and tables.
func (f Fingerprint) Short() string { return f.String()[:12] }

// IsZero reports whether f is the zero value (no fingerprint).
func (f Fingerprint) IsZero() bool { return f == Fingerprint{} }

// ParseFingerprint reads the full hex form.
func ParseFingerprint(s string) (Fingerprint, error) {
	var f Fingerprint
	b, err := hex.DecodeString(s)
	if err != nil || len(b) != len(f) {
		return f, errors.New("params: fingerprint must be 64 hex digits")
	}
	copy(f[:], b)
	return f, nil
}

// MarshalText implements encoding.TextMarshaler (JSON as a hex string).
func (f Fingerprint) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// UnmarshalText implements encoding.TextUnmarshaler.
func (f *Fingerprint) UnmarshalText(b []byte) error {
	v, err := ParseFingerprint(string(b))
	if err != nil {
		return err
	}
	*f = v
	return nil
}
