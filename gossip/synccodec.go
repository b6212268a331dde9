package gossip

// The sync coordinator's wire codec (/meshtrain/sync/2.0.0, docs/protocol.md
// "Sync mode"): the request and answer headers and the member list. Pure, as
// codec.go is: byte layouts and checks, no libp2p. A joiner's model travels
// in the exchange's frames (codec.go); a round's data moves on the
// all-reduce path (allreduce.go).

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshtrain/meshtrain/params"
)

// Sync wire sizes and limits.
const (
	// SyncRequestSize is the fixed size of a sync request header.
	SyncRequestSize = 80
	// SyncAnswerSize is the fixed size of a sync answer header.
	SyncAnswerSize = 40
	// MaxSyncMembers bounds a group: the member list of an answer must fit
	// its 16-bit byte count even with the longest peer IDs.
	MaxSyncMembers = 1000
	// maxPeerIDSize bounds one encoded peer ID; real ones are 34 to 46 bytes.
	maxPeerIDSize = 64
)

var (
	syncRequestMagic = [4]byte{'M', 'T', 'S', 'Q'}
	syncAnswerMagic  = [4]byte{'M', 'T', 'S', 'A'}
)

// SyncKind says what a sync request asks for.
type SyncKind uint8

// Sync request kinds.
const (
	// SyncContribute says the member has taken its local step of a round
	// (with its progress) and waits for the round's member list, among
	// whom it then all-reduces its vector.
	SyncContribute SyncKind = 1
	// SyncJoin asks the leader for the group's model at the last round
	// boundary; the leader then expects the joiner in the next round.
	SyncJoin SyncKind = 2
	// SyncProbe asks who leads the responder's group and how far its model
	// has come, without joining.
	SyncProbe SyncKind = 3
)

func (k SyncKind) String() string {
	switch k {
	case SyncContribute:
		return "contribute"
	case SyncJoin:
		return "join"
	case SyncProbe:
		return "probe"
	}
	return fmt.Sprintf("kind(%d)", uint8(k))
}

// SyncRequest is the first thing a member writes on a sync stream.
type SyncRequest struct {
	Kind        SyncKind
	Fingerprint params.Fingerprint
	// Elements is the parameter count the member trains (0 if unknown).
	Elements uint64
	// Round is the round a contribution belongs to (>= 1); 0 for join and
	// probe.
	Round int64
	// Progress after the member's local step, and Base, the Group of the
	// model the step started from: a contribution's only; 0 otherwise.
	Progress params.Progress
	Base     uint64
}

// Marshal encodes the request as it goes on the wire.
func (q SyncRequest) Marshal() [SyncRequestSize]byte {
	var b [SyncRequestSize]byte
	copy(b[0:4], syncRequestMagic[:])
	b[4] = WireVersion
	b[5] = byte(q.Kind)
	copy(b[8:40], q.Fingerprint[:])
	binary.LittleEndian.PutUint64(b[40:48], q.Elements)
	binary.LittleEndian.PutUint64(b[48:56], uint64(q.Round))
	binary.LittleEndian.PutUint64(b[56:64], math.Float64bits(float64(q.Progress)))
	binary.LittleEndian.PutUint64(b[64:72], q.Base)
	return b
}

// ParseSyncRequest decodes and checks a sync request header.
func ParseSyncRequest(b []byte) (SyncRequest, error) {
	if len(b) < SyncRequestSize {
		return SyncRequest{}, fmt.Errorf("%w: sync request of %d bytes", ErrShortRead, len(b))
	}
	if [4]byte(b[0:4]) != syncRequestMagic {
		return SyncRequest{}, fmt.Errorf("%w: sync request starts %q", ErrBadMagic, b[0:4])
	}
	if b[4] != WireVersion {
		return SyncRequest{}, fmt.Errorf("%w: sync request version %d", ErrBadVersion, b[4])
	}
	q := SyncRequest{Kind: SyncKind(b[5]), Elements: binary.LittleEndian.Uint64(b[40:48]),
		Progress: params.Progress(math.Float64frombits(binary.LittleEndian.Uint64(b[56:64]))),
		Base:     binary.LittleEndian.Uint64(b[64:72])}
	copy(q.Fingerprint[:], b[8:40])
	round := binary.LittleEndian.Uint64(b[48:56])
	pf := float64(q.Progress)
	switch {
	case q.Kind < SyncContribute || q.Kind > SyncProbe:
		return q, fmt.Errorf("%w: sync request kind %d", ErrProtocol, b[5])
	case b[6] != 0 || b[7] != 0 || binary.LittleEndian.Uint64(b[72:80]) != 0:
		return q, fmt.Errorf("%w: reserved sync request bytes set", ErrProtocol)
	case round > math.MaxInt64:
		return q, fmt.Errorf("%w: sync round %d", ErrProtocol, round)
	case math.IsNaN(pf) || math.IsInf(pf, 0):
		return q, fmt.Errorf("%w: sync progress %v", ErrNonFinite, pf)
	case pf < 0:
		return q, fmt.Errorf("%w: negative sync progress %v", ErrProtocol, pf)
	}
	q.Round = int64(round)
	if (q.Kind == SyncContribute) != (q.Round > 0) {
		return q, fmt.Errorf("%w: %s request for round %d", ErrProtocol, q.Kind, q.Round)
	}
	if q.Kind != SyncContribute && (pf != 0 || q.Base != 0) {
		return q, fmt.Errorf("%w: %s request with progress or base", ErrProtocol, q.Kind)
	}
	return q, nil
}

// SyncCode is a sync answer's verdict.
type SyncCode uint8

// Sync answer codes.
const (
	// SyncOK: to a contribution, the round's member list (all-reduce
	// among them); to a join, the group's model follows; to a probe, the
	// group's round and progress.
	SyncOK SyncCode = 0
	// SyncBusy: at capacity, or the round is being averaged; ask again soon.
	SyncBusy SyncCode = 1
	// SyncUnsynced: the responder belongs to no group.
	SyncUnsynced SyncCode = 2
	// SyncNotLeader: the responder does not lead; the member list holds
	// the leader it follows, if it knows one.
	SyncNotLeader SyncCode = 3
	// SyncStale: the contribution's round is closed (the member was late or
	// dropped); Round is the leader's last completed round. Join again.
	SyncStale SyncCode = 4
	// SyncAhead: the contribution is for a round past the one collected;
	// the member holds another group's model. Join again.
	SyncAhead SyncCode = 5
	// SyncDuplicate: the leader already holds a contribution or a stream
	// from this peer for this round.
	SyncDuplicate SyncCode = 6
	// SyncRejected: refused; Reason says why.
	SyncRejected SyncCode = 7
)

var syncCodeNames = [...]string{"ok", "busy", "unsynced", "not_leader", "stale", "ahead", "duplicate", "rejected"}

func (c SyncCode) String() string {
	if int(c) < len(syncCodeNames) {
		return syncCodeNames[c]
	}
	return fmt.Sprintf("code(%d)", uint8(c))
}

// SyncAnswer is the fixed-size header of every sync answer. A member list
// of MemberCount peer IDs (MembersSize bytes) follows it, then, for a join,
// two parameter frames: parameters, then momentum.
type SyncAnswer struct {
	Code SyncCode
	// Reason is set with SyncRejected.
	Reason Reason
	// Round: the round whose member list this is (a contribution), the
	// round a joiner's model ends (a join or probe), or the leader's last
	// completed round (stale, ahead).
	Round int64
	// Progress of the model that follows or that a probe describes.
	Progress params.Progress
	// MemberCount and MembersSize describe the member list that follows.
	MemberCount int
	MembersSize int
	// Group names the model at the end of Round: for a contribution, the
	// round's all-reduce (and the base of the next round's contributions);
	// for a join, the model that follows.
	Group uint64
}

// Marshal encodes the answer header as it goes on the wire.
func (a SyncAnswer) Marshal() [SyncAnswerSize]byte {
	var b [SyncAnswerSize]byte
	copy(b[0:4], syncAnswerMagic[:])
	b[4] = WireVersion
	b[5] = byte(a.Code)
	b[6] = byte(a.Reason)
	binary.LittleEndian.PutUint64(b[8:16], uint64(a.Round))
	binary.LittleEndian.PutUint64(b[16:24], math.Float64bits(float64(a.Progress)))
	binary.LittleEndian.PutUint16(b[24:26], uint16(a.MemberCount))
	binary.LittleEndian.PutUint16(b[26:28], uint16(a.MembersSize))
	binary.LittleEndian.PutUint64(b[32:40], a.Group)
	return b
}

// ParseSyncAnswer decodes and checks a sync answer header on its own terms;
// what a member list must hold for a given request is checked by the caller.
func ParseSyncAnswer(b []byte) (SyncAnswer, error) {
	if len(b) < SyncAnswerSize {
		return SyncAnswer{}, fmt.Errorf("%w: sync answer of %d bytes", ErrShortRead, len(b))
	}
	if [4]byte(b[0:4]) != syncAnswerMagic {
		return SyncAnswer{}, fmt.Errorf("%w: sync answer starts %q", ErrBadMagic, b[0:4])
	}
	if b[4] != WireVersion {
		return SyncAnswer{}, fmt.Errorf("%w: sync answer version %d", ErrBadVersion, b[4])
	}
	round := binary.LittleEndian.Uint64(b[8:16])
	a := SyncAnswer{
		Code:        SyncCode(b[5]),
		Reason:      Reason(b[6]),
		Round:       int64(round),
		Progress:    params.Progress(math.Float64frombits(binary.LittleEndian.Uint64(b[16:24]))),
		MemberCount: int(binary.LittleEndian.Uint16(b[24:26])),
		MembersSize: int(binary.LittleEndian.Uint16(b[26:28])),
		Group:       binary.LittleEndian.Uint64(b[32:40]),
	}
	pf := float64(a.Progress)
	switch {
	case a.Code > SyncRejected:
		return a, fmt.Errorf("%w: sync answer code %d", ErrProtocol, b[5])
	case (a.Code == SyncRejected) != (a.Reason != ReasonNone):
		return a, fmt.Errorf("%w: sync answer %s with reason %d", ErrProtocol, a.Code, b[6])
	case b[7] != 0 || binary.LittleEndian.Uint32(b[28:32]) != 0:
		return a, fmt.Errorf("%w: reserved sync answer bytes set", ErrProtocol)
	case round > math.MaxInt64:
		return a, fmt.Errorf("%w: sync round %d", ErrProtocol, round)
	case math.IsNaN(pf) || math.IsInf(pf, 0):
		return a, fmt.Errorf("%w: sync progress %v", ErrNonFinite, pf)
	case pf < 0:
		return a, fmt.Errorf("%w: negative sync progress %v", ErrProtocol, pf)
	case a.MemberCount > MaxSyncMembers:
		return a, fmt.Errorf("%w: %d members, limit %d", ErrOversize, a.MemberCount, MaxSyncMembers)
	case a.MembersSize < 2*a.MemberCount || a.MembersSize > a.MemberCount*(1+maxPeerIDSize):
		return a, fmt.Errorf("%w: %d members in %d bytes", ErrProtocol, a.MemberCount, a.MembersSize)
	case a.MemberCount > 1 && a.Code != SyncOK, a.MemberCount == 1 && a.Code != SyncOK && a.Code != SyncNotLeader:
		return a, fmt.Errorf("%w: sync answer %s with %d members", ErrProtocol, a.Code, a.MemberCount)
	}
	return a, nil
}

// AppendMembers appends the wire form of a member list: per peer, one
// length byte and the peer ID's bytes.
func AppendMembers(b []byte, ms []peer.ID) []byte {
	for _, p := range ms {
		b = append(b, byte(len(p)))
		b = append(b, p...)
	}
	return b
}

// ParseMembers decodes a member list of count peers. Peer IDs must be valid
// multihashes in strictly ascending order (so a list has no duplicates and
// one encoding), each at most 64 bytes.
func ParseMembers(b []byte, count int) ([]peer.ID, error) {
	if count > MaxSyncMembers {
		return nil, fmt.Errorf("%w: %d members, limit %d", ErrOversize, count, MaxSyncMembers)
	}
	out := make([]peer.ID, 0, count)
	for len(out) < count {
		if len(b) == 0 {
			return nil, fmt.Errorf("%w: member list ends after %d of %d peers", ErrProtocol, len(out), count)
		}
		n := int(b[0])
		if n == 0 || n > maxPeerIDSize || n > len(b)-1 {
			return nil, fmt.Errorf("%w: member %d of %d bytes", ErrProtocol, len(out), n)
		}
		p, err := peer.IDFromBytes(b[1 : 1+n])
		if err != nil {
			return nil, fmt.Errorf("%w: member %d: %v", ErrProtocol, len(out), err)
		}
		if k := len(out); k > 0 && out[k-1] >= p {
			return nil, fmt.Errorf("%w: member list not strictly ascending at %d", ErrProtocol, k)
		}
		out = append(out, p)
		b = b[1+n:]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("%w: %d bytes after the member list", ErrProtocol, len(b))
	}
	return out, nil
}
