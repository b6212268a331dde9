package store

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"runtime"
	"testing"
)

// fuzzID is the checkpoint ID FuzzCheckpoint stores its input under.
const fuzzID = 7

// checkpointSeed saves a small checkpoint of several chunks and returns the
// body of its manifest (renumbered fuzzID, without the CRC that the fuzz
// body adds back) and its chunk data, parameters then optimizer state.
func checkpointSeed(f *testing.F, c *Checkpoint) (body, data []byte) {
	s, err := newMemory(Options{ChunkSize: MinChunkSize})
	if err != nil {
		f.Fatal(err)
	}
	info, err := s.Save(context.Background(), c)
	if err != nil {
		f.Fatal(err)
	}
	db := s.kv.(*memKV)
	m, err := decodeManifest(db.m[string(manKey(info.ID))])
	if err != nil {
		f.Fatal(err)
	}
	m.id = fuzzID
	enc := m.encode()
	for _, sec := range []struct {
		tag byte
		n   uint64
	}{{sectionParam, m.paramsLen}, {sectionOpt, m.optLen}} {
		for idx := range numChunks(sec.n, m.chunkSize) {
			data = append(data, db.m[string(chunkKey(info.ID, sec.tag, idx))]...)
		}
	}
	return enc[:len(enc)-crcSize], data
}

// FuzzCheckpoint stores a checkpoint whose manifest and data are arbitrary
// and reads it back the way Load, LoadLatest and retention do. The reader
// must never panic, nor allocate for data the store does not hold; it must
// report anything it refuses as ErrCorrupt; and what it accepts must match
// its manifest and, if it is a checkpoint Save takes, survive a Save and a
// Load unchanged.
func FuzzCheckpoint(f *testing.F) {
	body, data := checkpointSeed(f, ckpt(fpA, 3, 2*MinChunkSize/4+3, 5))
	f.Add(body, data)
	f.Add(body, data[:len(data)-1])                 // the last chunk is short
	f.Add(body, append(bytes.Clone(data), 0))       // and here long
	f.Add(body, bytes.Repeat([]byte{1}, len(data))) // checksum mismatch
	f.Add(body, []byte{})
	small, smallData := checkpointSeed(f, ckpt(fpA, 1, 1, 0))
	f.Add(small, smallData)
	f.Add([]byte{kindManifest, recordVersion}, []byte{})
	f.Add([]byte{}, []byte{})
	f.Fuzz(func(t *testing.T, man, data []byte) {
		// As in FuzzManifest: sealing the bytes too gets the fuzzer past
		// the CRC to the fields and the data behind them.
		for _, v := range [][]byte{man, seal(man)} {
			checkCheckpoint(t, v, data)
		}
	})
}

// checkCheckpoint stores manifest value v under fuzzID, lays data out as
// that manifest's chunks (as far as it goes), and reads the checkpoint.
func checkCheckpoint(t *testing.T, v, data []byte) {
	db := newMemKV()
	db.m[string(manKey(fuzzID))] = v
	m, merr := decodeManifest(v)
	if merr == nil {
		rest := data
		for _, sec := range []struct {
			tag byte
			n   uint64
		}{{sectionParam, m.paramsLen}, {sectionOpt, m.optLen}} {
			size := sec.n * 4
			for idx, off := uint32(0), uint64(0); off < size && len(rest) > 0; idx, off = idx+1, off+uint64(m.chunkSize) {
				n := min(uint64(m.chunkSize), size-off, uint64(len(rest)))
				db.m[string(chunkKey(fuzzID, sec.tag, idx))] = rest[:n]
				rest = rest[n:]
			}
		}
	}
	var c *Checkpoint
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	err := db.view(func(r kvReader) error {
		var err error
		c, err = readCheckpoint(context.Background(), r, fuzzID, true)
		return err
	})
	runtime.ReadMemStats(&after)
	// Growing a vector chunk by chunk costs at most three times its bytes;
	// the manifest's fields are copied out of it.
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 3*uint64(len(data))+4*uint64(len(v))+1<<20 {
		t.Fatalf("reading a %d-byte manifest and %d bytes of data allocated %d bytes", len(v), len(data), grew)
	}
	if err != nil {
		if !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error %v does not wrap ErrCorrupt", err)
		}
		return
	}
	if merr != nil {
		t.Fatalf("read a checkpoint whose manifest does not decode: %v", merr)
	}
	if c.ID != fuzzID || m.id != fuzzID || uint64(len(c.Params)) != m.paramsLen || uint64(len(c.OptState)) != m.optLen ||
		c.Step != m.step || c.Progress != m.progress || c.Fingerprint != m.fingerprint || c.Final != m.final ||
		!c.Created.Equal(m.created) || !maps.Equal(c.Meta, m.meta) {
		t.Fatalf("checkpoint %d (%d+%d floats) does not match its manifest %+v", c.ID, len(c.Params), len(c.OptState), m)
	}
	if validateCheckpoint(c) != nil || c.Created.IsZero() {
		return // read back, but not something Save writes
	}
	s := NewMemory()
	info, err := s.Save(context.Background(), c)
	if err != nil {
		t.Fatalf("saving a checkpoint read back: %v", err)
	}
	again, err := s.Load(context.Background(), info.ID)
	if err != nil {
		t.Fatalf("loading it: %v", err)
	}
	if !bytes.Equal(floatBytes(again.Params), floatBytes(c.Params)) || !bytes.Equal(floatBytes(again.OptState), floatBytes(c.OptState)) ||
		again.Step != c.Step || again.Progress != c.Progress || again.Fingerprint != c.Fingerprint || again.Final != c.Final ||
		!again.Created.Equal(c.Created) || !maps.Equal(again.Meta, c.Meta) {
		t.Fatalf("save and load changed checkpoint %+v", c)
	}
}
