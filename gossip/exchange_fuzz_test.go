package gossip

import (
	"bytes"
	"testing"
)

// FuzzExchangeHeaders feeds arbitrary bytes to the request and response
// headers that open every exchange and pull stream. Neither parser may
// panic; a refusal must carry a reason the counters can name; what is
// accepted must be a kind or status the protocol has, and must re-encode to
// exactly the bytes read, so the header has one encoding.
func FuzzExchangeHeaders(f *testing.F) {
	exchange := Request{Kind: KindExchange, Fingerprint: testFP, Elements: 235146}.Marshal()
	pull := Request{Kind: KindPull, Fingerprint: testFP}.Marshal()
	ok := Response{Status: StatusOK}.Marshal()
	busy := Response{Status: StatusBusy}.Marshal()
	refused := Response{Status: StatusRejected, Reason: ReasonChecksum}.Marshal()
	reserved := exchange
	reserved[6] = 1
	unknownReason := Response{Status: StatusRejected, Reason: 200}.Marshal()
	reasonWithOK := ok
	reasonWithOK[6] = byte(ReasonChecksum)
	for _, b := range [][]byte{
		exchange[:], pull[:], ok[:], busy[:], refused[:], reserved[:], unknownReason[:], reasonWithOK[:],
		exchange[:RequestSize-1], ok[:ResponseSize-1],
		append(exchange[:], ok[:]...),
		craftFrame(FrameHeader{DType: FP32, Fingerprint: testFP, Elements: 1, ChunkSize: MinChunkSize}, nil),
		{},
	} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		if q, err := ParseRequest(b); err == nil {
			if q.Kind != KindPull && q.Kind != KindExchange {
				t.Fatalf("accepted request kind %v", q.Kind)
			}
			if again := q.Marshal(); !bytes.Equal(again[:], b[:RequestSize]) {
				t.Fatalf("request %x re-encodes as %x", b[:RequestSize], again)
			}
		} else if ReasonOf(err) == ReasonNone {
			t.Fatalf("request error without a reason: %v", err)
		}
		r, err := ParseResponse(b)
		if err != nil {
			if ReasonOf(err) == ReasonNone {
				t.Fatalf("response error without a reason: %v", err)
			}
			return
		}
		if r.Status > StatusRejected || (r.Status != StatusRejected && r.Reason != ReasonNone) {
			t.Fatalf("accepted response %+v", r)
		}
		if again := r.Marshal(); !bytes.Equal(again[:], b[:ResponseSize]) {
			t.Fatalf("response %x re-encodes as %x", b[:ResponseSize], again)
		}
		// A refusal's reason code is the peer's to choose: naming and
		// counting it must work for any byte.
		var c Counters
		c.Reject(r.Reason)
		if r.Reason.String() == "" || r.Status.String() == "" {
			t.Fatalf("response %+v has no name", r)
		}
	})
}
