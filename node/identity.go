package node

import (
	"errors"
	"fmt"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/meshtrain/meshtrain/store"
)

// Identity returns the node's persistent Ed25519 key and peer ID from st,
// creating and storing a new key on first use (created reports that). The
// same data dir therefore always comes back as the same peer.
func Identity(st store.Store) (key crypto.PrivKey, id peer.ID, created bool, err error) {
	raw, err := st.Identity()
	switch {
	case errors.Is(err, store.ErrNotFound):
		key, _, err = crypto.GenerateKeyPair(crypto.Ed25519, -1)
		if err != nil {
			return nil, "", false, fmt.Errorf("node: generate identity: %w", err)
		}
		raw, err = crypto.MarshalPrivateKey(key)
		if err != nil {
			return nil, "", false, fmt.Errorf("node: marshal identity: %w", err)
		}
		if err := st.SetIdentity(raw); err != nil {
			return nil, "", false, fmt.Errorf("node: store identity: %w", err)
		}
		created = true
	case err != nil:
		return nil, "", false, fmt.Errorf("node: read identity: %w", err)
	default:
		key, err = crypto.UnmarshalPrivateKey(raw)
		if err != nil {
			return nil, "", false, fmt.Errorf("node: identity key in the data dir is unreadable: %w", err)
		}
	}
	id, err = peer.IDFromPrivateKey(key)
	if err != nil {
		return nil, "", false, fmt.Errorf("node: peer ID from identity: %w", err)
	}
	return key, id, created, nil
}
