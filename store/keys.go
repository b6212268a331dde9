package store

import (
	"encoding/binary"
	"slices"
)

// Key space; doc.go describes it for humans. Integers in keys are
// big-endian so that byte order is numeric order.
var (
	keyFormat    = []byte("meta/format")
	keyCkptSeq   = []byte("ckpt/seq")
	prefixMan    = []byte("ckpt/m/")
	prefixChunk  = []byte("ckpt/d/")
	keyIdentity  = []byte("node/identity")
	prefixPeer   = []byte("peer/")
	prefixPoint  = []byte("hist/")
	lenManKey    = len(prefixMan) + 8
	lenChunkKey  = len(prefixChunk) + 8 + 1 + 4
	lenPointKey  = len(prefixPoint) + 8
	sectionParam = byte('p')
	sectionOpt   = byte('o')
)

func manKey(id uint64) []byte {
	return binary.BigEndian.AppendUint64(slices.Clone(prefixMan), id)
}

func chunkPrefix(id uint64) []byte {
	return binary.BigEndian.AppendUint64(slices.Clone(prefixChunk), id)
}

func chunkKey(id uint64, section byte, idx uint32) []byte {
	k := append(chunkPrefix(id), section)
	return binary.BigEndian.AppendUint32(k, idx)
}

func peerKey(id string) []byte { return append(slices.Clone(prefixPeer), id...) }

func pointKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(slices.Clone(prefixPoint), seq)
}

// idFromManKey and idFromChunkKey return ok=false for a key of the wrong
// shape, which the callers treat as a stray key rather than a crash.
func idFromManKey(k []byte) (uint64, bool) {
	if len(k) != lenManKey {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[len(prefixMan):]), true
}

func idFromChunkKey(k []byte) (uint64, bool) {
	if len(k) != lenChunkKey {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[len(prefixChunk):]), true
}

func seqFromPointKey(k []byte) (uint64, bool) {
	if len(k) != lenPointKey {
		return 0, false
	}
	return binary.BigEndian.Uint64(k[len(prefixPoint):]), true
}
