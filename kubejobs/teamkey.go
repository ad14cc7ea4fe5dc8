package kubejobs

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"

	"github.com/sluice-project/sluice/wire"
)

// MinKeyBytes is the least a reconciler's key may hold.
const MinKeyBytes = 32

// teamKey is the team key of job id submitted for the object with uid:
// HMAC-SHA256 under the reconciler's key. Derived, not drawn at random,
// so that the reconciler never reads a Secret back (it may only create
// them) and a Submit retried after a crash uses the same key; the uid
// gives an object deleted and applied again another key.
func teamKey(key []byte, uid, id string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("sluice kube-jobs team key\x00"))
	m.Write([]byte(uid))
	m.Write([]byte{0})
	m.Write([]byte(id))
	return m.Sum(nil)
}

// teamKeyFile is k as a team key file holds it (wire.NewTeamKey).
func teamKeyFile(k []byte) []byte { return append(hex.AppendEncode(nil, k), '\n') }

// agentAuth is the record's AgentAuth for team key k (broker.WithTeamKey).
func agentAuth(k []byte) string { return wire.AgentPasswordHash(wire.AgentNATSPassword(k)) }
