package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math"
	"slices"
	"time"
	"unicode/utf8"

	"github.com/meshtrain/meshtrain/params"
)

// Every value the store writes, except raw data chunks and the format key,
// is a record: a kind byte, a version byte, the fields, and a CRC-32C of
// all that. The CRC makes a flipped bit in a small record an ErrCorrupt
// rather than a plausible wrong value; chunk data is covered by the
// SHA-256 in its manifest instead.
const (
	kindManifest = 'M'
	kindPeer     = 'P'
	kindPoint    = 'H'
	kindIdentity = 'I'

	recordVersion = 1
	crcSize       = 4
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// errDecode is wrapped (together with ErrCorrupt) by every decode error.
var errDecode = errors.New("bad record")

type encoder struct{ b []byte }

func newRecord(kind byte) *encoder { return &encoder{b: []byte{kind, recordVersion}} }

func (e *encoder) u8(v uint8)   { e.b = append(e.b, v) }
func (e *encoder) u32(v uint32) { e.b = binary.BigEndian.AppendUint32(e.b, v) }
func (e *encoder) u64(v uint64) { e.b = binary.BigEndian.AppendUint64(e.b, v) }
func (e *encoder) i64(v int64)  { e.u64(uint64(v)) }
func (e *encoder) f64(v float64) {
	e.u64(math.Float64bits(v))
}
func (e *encoder) bytes(v []byte) { e.u32(uint32(len(v))); e.b = append(e.b, v...) }
func (e *encoder) str(v string)   { e.u32(uint32(len(v))); e.b = append(e.b, v...) }

// time encodes the zero time as 0 so it survives a round trip; any other
// time is nanoseconds since the Unix epoch.
func (e *encoder) time(t time.Time) {
	if t.IsZero() {
		e.i64(0)
		return
	}
	e.i64(t.UnixNano())
}

func (e *encoder) finish() []byte {
	return binary.BigEndian.AppendUint32(e.b, crc32.Checksum(e.b, castagnoli))
}

// decoder reads fields with a sticky error, so a decode function checks it
// once at the end; no read ever goes past the buffer.
type decoder struct {
	b   []byte
	err error
}

func openRecord(kind byte, v []byte) *decoder {
	if len(v) < 2+crcSize {
		return &decoder{err: fmt.Errorf("%d bytes is too short", len(v))}
	}
	body, sum := v[:len(v)-crcSize], binary.BigEndian.Uint32(v[len(v)-crcSize:])
	if crc32.Checksum(body, castagnoli) != sum {
		return &decoder{err: errors.New("checksum mismatch")}
	}
	if body[0] != kind {
		return &decoder{err: fmt.Errorf("record kind %q, want %q", body[0], kind)}
	}
	if body[1] != recordVersion {
		return &decoder{err: fmt.Errorf("record version %d, want %d", body[1], recordVersion)}
	}
	return &decoder{b: body[2:]}
}

func (d *decoder) take(n int) []byte {
	if d.err != nil {
		return nil
	}
	if n < 0 || n > len(d.b) {
		d.err = fmt.Errorf("field of %d bytes overruns record (%d left)", n, len(d.b))
		return nil
	}
	v := d.b[:n]
	d.b = d.b[n:]
	return v
}

func (d *decoder) u8() uint8 {
	if v := d.take(1); v != nil {
		return v[0]
	}
	return 0
}

func (d *decoder) u32() uint32 {
	if v := d.take(4); v != nil {
		return binary.BigEndian.Uint32(v)
	}
	return 0
}

func (d *decoder) u64() uint64 {
	if v := d.take(8); v != nil {
		return binary.BigEndian.Uint64(v)
	}
	return 0
}

func (d *decoder) i64() int64   { return int64(d.u64()) }
func (d *decoder) f64() float64 { return math.Float64frombits(d.u64()) }

func (d *decoder) bytes() []byte {
	n := d.u32()
	if d.err != nil {
		return nil
	}
	if uint64(n) > uint64(len(d.b)) {
		d.err = fmt.Errorf("length %d overruns record (%d left)", n, len(d.b))
		return nil
	}
	return append([]byte(nil), d.take(int(n))...)
}

func (d *decoder) str() string {
	b := d.bytes()
	if d.err == nil && !utf8.Valid(b) {
		d.err = errors.New("string is not UTF-8")
	}
	return string(b)
}

func (d *decoder) bool() bool {
	switch v := d.u8(); v {
	case 0:
		return false
	case 1:
		return true
	default:
		if d.err == nil {
			d.err = fmt.Errorf("bool byte %d", v)
		}
		return false
	}
}

func (d *decoder) time() time.Time {
	n := d.i64()
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// count reads a length prefix for a list whose items take at least min
// bytes each, refusing counts the rest of the record cannot hold so a
// corrupt count cannot make the decoder allocate gigabytes.
func (d *decoder) count(min int) int {
	n := d.u32()
	if d.err == nil && uint64(n)*uint64(min) > uint64(len(d.b)) {
		d.err = fmt.Errorf("count %d overruns record", n)
		return 0
	}
	return int(n)
}

func (d *decoder) done(what string) error {
	if d.err == nil && len(d.b) != 0 {
		d.err = fmt.Errorf("%d trailing bytes", len(d.b))
	}
	if d.err != nil {
		return fmt.Errorf("%w: %w: %s: %w", ErrCorrupt, errDecode, what, d.err)
	}
	return nil
}

// manifest is what makes a checkpoint exist: it names the data chunks and
// carries the SHA-256 of their bytes. It is committed only after every
// chunk is, so a crash can leave chunks without a manifest but never a
// manifest without its chunks.
type manifest struct {
	id          uint64
	step        int64
	progress    params.Progress
	fingerprint params.Fingerprint
	created     time.Time
	final       bool
	chunkSize   uint32
	paramsLen   uint64 // float32 elements
	optLen      uint64 // float32 elements
	sum         [32]byte
	meta        map[string]string
}

func (m *manifest) encode() []byte {
	e := newRecord(kindManifest)
	e.u64(m.id)
	e.i64(m.step)
	e.f64(float64(m.progress))
	e.b = append(e.b, m.fingerprint[:]...)
	e.time(m.created)
	if m.final {
		e.u8(1)
	} else {
		e.u8(0)
	}
	e.u32(m.chunkSize)
	e.u64(m.paramsLen)
	e.u64(m.optLen)
	e.b = append(e.b, m.sum[:]...)
	e.u32(uint32(len(m.meta)))
	for _, k := range sortedKeys(m.meta) {
		e.str(k)
		e.str(m.meta[k])
	}
	return e.finish()
}

// maxVectorLen bounds a vector's element count so sizes in bytes cannot
// overflow and a corrupt length cannot ask for an absurd allocation.
const maxVectorLen = 1 << 36

func decodeManifest(v []byte) (*manifest, error) {
	d := openRecord(kindManifest, v)
	m := &manifest{}
	m.id = d.u64()
	m.step = d.i64()
	m.progress = params.Progress(d.f64())
	copy(m.fingerprint[:], d.take(len(m.fingerprint)))
	m.created = d.time()
	m.final = d.bool()
	m.chunkSize = d.u32()
	m.paramsLen = d.u64()
	m.optLen = d.u64()
	copy(m.sum[:], d.take(len(m.sum)))
	n := d.count(8)
	if d.err == nil && n > 0 {
		m.meta = make(map[string]string, n)
	}
	prev := ""
	for i := 0; i < n && d.err == nil; i++ {
		k, val := d.str(), d.str()
		// Keys are written sorted; demanding that keeps one encoding per
		// manifest and rules out duplicates.
		if i > 0 && k <= prev && d.err == nil {
			d.err = fmt.Errorf("meta key %q out of order", k)
		}
		prev = k
		m.meta[k] = val
	}
	if d.err == nil {
		switch {
		case !m.progress.Valid():
			d.err = fmt.Errorf("progress %v", m.progress)
		case m.step < 0:
			d.err = fmt.Errorf("step %d", m.step)
		case m.chunkSize < MinChunkSize || m.chunkSize > MaxChunkSize || m.chunkSize%4 != 0:
			d.err = fmt.Errorf("chunk size %d", m.chunkSize)
		case m.paramsLen > maxVectorLen || m.optLen > maxVectorLen:
			d.err = fmt.Errorf("vector lengths %d, %d", m.paramsLen, m.optLen)
		}
	}
	if err := d.done("manifest"); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *manifest) info() Info {
	return Info{
		ID:          m.id,
		Step:        m.step,
		Progress:    m.progress,
		Fingerprint: m.fingerprint,
		Created:     m.created,
		Size:        int64(m.paramsLen+m.optLen) * 4,
		ParamsLen:   int(m.paramsLen),
		OptLen:      int(m.optLen),
		Final:       m.final,
	}
}

func encodePeer(p Peer) []byte {
	e := newRecord(kindPeer)
	e.str(p.ID)
	e.u32(uint32(len(p.Addrs)))
	for _, a := range p.Addrs {
		e.str(a)
	}
	e.time(p.LastSeen)
	e.f64(p.Score)
	e.time(p.BannedUntil)
	e.str(p.Notes)
	return e.finish()
}

func decodePeer(v []byte) (Peer, error) {
	d := openRecord(kindPeer, v)
	var p Peer
	p.ID = d.str()
	n := d.count(4)
	if d.err == nil && n > 0 {
		p.Addrs = make([]string, 0, n)
	}
	for i := 0; i < n && d.err == nil; i++ {
		p.Addrs = append(p.Addrs, d.str())
	}
	p.LastSeen = d.time()
	p.Score = d.f64()
	p.BannedUntil = d.time()
	p.Notes = d.str()
	if err := d.done("peer record"); err != nil {
		return Peer{}, err
	}
	return p, nil
}

func encodePoint(p Point) []byte {
	e := newRecord(kindPoint)
	e.time(p.Time)
	e.i64(p.Step)
	e.f64(float64(p.Progress))
	e.f64(p.Loss)
	e.f64(p.Accuracy)
	e.f64(p.SamplesPerSec)
	return e.finish()
}

func decodePoint(v []byte) (Point, error) {
	d := openRecord(kindPoint, v)
	var p Point
	p.Time = d.time()
	p.Step = d.i64()
	p.Progress = params.Progress(d.f64())
	p.Loss = d.f64()
	p.Accuracy = d.f64()
	p.SamplesPerSec = d.f64()
	if err := d.done("history point"); err != nil {
		return Point{}, err
	}
	return p, nil
}

func encodeIdentity(key []byte) []byte {
	e := newRecord(kindIdentity)
	e.bytes(key)
	return e.finish()
}

func decodeIdentity(v []byte) ([]byte, error) {
	d := openRecord(kindIdentity, v)
	key := d.bytes()
	if err := d.done("identity"); err != nil {
		return nil, err
	}
	return key, nil
}

// sortedKeys makes the manifest encoding deterministic.
func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
