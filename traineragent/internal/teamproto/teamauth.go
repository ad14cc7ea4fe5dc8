package teamproto

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/sluice-project/sluice/wire"
)

// The team's envelope: every team request and reply carries, in NATS
// headers, who sent it (the member's name and the session its join
// opened), a sequence number, the planner run that answers, and an
// HMAC-SHA256 under the job's team key over all of these and the body. A
// message is checked before its body is parsed: a holder of another job's
// credentials (every node of every job shares the agent NATS user) can
// neither forge nor replay one, and within the job a message that claims
// to be member M must carry M's session. See docs/design-multi-agent.md.
const (
	KindRequest = "request"
	KindReply   = "reply"

	// maxTeamHeader bounds each header value of a team message.
	maxTeamHeader = 256
)

// Auth signs and checks a reader's team messages.
type Auth struct {
	Key         []byte
	Job, Reader string
}

// NewAuth signs and checks the team messages of reader of job under the
// job's team key.
func NewAuth(key []byte, job, reader string) *Auth {
	return &Auth{Key: key, Job: job, Reader: reader}
}

// Head is a team message's envelope.
type Head struct {
	Op, Member, Session, Planner string
	Seq                          uint64
}

// Sum is the MAC of a message of kind with h and body.
func (t *Auth) Sum(kind string, h Head, body []byte) []byte {
	mac := hmac.New(sha256.New, t.Key)
	var b []byte
	for _, s := range []string{wire.TeamProtocol, kind, t.Job, t.Reader, h.Op, h.Member, h.Session, h.Planner} {
		b = binary.AppendUvarint(b, uint64(len(s)))
		b = append(b, s...)
	}
	b = binary.AppendUvarint(b, h.Seq)
	b = binary.AppendUvarint(b, uint64(len(body)))
	mac.Write(b)
	mac.Write(body)
	return mac.Sum(nil)
}

// Seal sets m's envelope headers for h, its MAC over m.Data.
func (t *Auth) Seal(m *nats.Msg, kind string, h Head) {
	if m.Header == nil {
		m.Header = nats.Header{}
	}
	m.Header.Set(wire.TeamHeaderVersion, wire.TeamProtocol)
	m.Header.Set(wire.TeamHeaderMember, h.Member)
	m.Header.Set(wire.TeamHeaderSession, h.Session)
	m.Header.Set(wire.TeamHeaderSeq, strconv.FormatUint(h.Seq, 10))
	if h.Planner != "" {
		m.Header.Set(wire.TeamHeaderPlanner, h.Planner)
	}
	m.Header.Set(wire.TeamHeaderMAC, hex.EncodeToString(t.Sum(kind, h, m.Data)))
}

// ErrAuth marks a team message refused by its envelope.
var ErrAuth = errors.New("team message refused")

// Open checks m's envelope as a message of kind for op and returns it.
// Nothing of the body is read.
func (t *Auth) Open(m *nats.Msg, kind, op string) (Head, error) {
	h := Head{Op: op}
	get := func(k string) (string, error) {
		v := m.Header.Get(k)
		if len(v) > maxTeamHeader {
			return "", fmt.Errorf("%w: header %s of %d bytes: want at most %d", ErrAuth, k, len(v), maxTeamHeader)
		}
		return v, nil
	}
	if m.Header == nil {
		return h, fmt.Errorf("%w: no team envelope (an agent of another version, or not an agent)", ErrAuth)
	}
	if v := m.Header.Get(wire.TeamHeaderVersion); v != wire.TeamProtocol {
		return h, fmt.Errorf("%w: team protocol %.16q, want %s: every agent of a team must run the same version of sluice", ErrAuth, v, wire.TeamProtocol)
	}
	var err error
	if h.Member, err = get(wire.TeamHeaderMember); err != nil {
		return h, err
	}
	if h.Session, err = get(wire.TeamHeaderSession); err != nil {
		return h, err
	}
	if h.Planner, err = get(wire.TeamHeaderPlanner); err != nil {
		return h, err
	}
	seq, err := get(wire.TeamHeaderSeq)
	if err != nil {
		return h, err
	}
	if h.Seq, err = strconv.ParseUint(seq, 10, 64); err != nil {
		return h, fmt.Errorf("%w: sequence %.24q", ErrAuth, seq)
	}
	sum, err := hex.DecodeString(m.Header.Get(wire.TeamHeaderMAC))
	if err != nil || len(sum) != sha256.Size {
		return h, fmt.Errorf("%w: no valid MAC", ErrAuth)
	}
	if !hmac.Equal(sum, t.Sum(kind, h, m.Data)) {
		return h, fmt.Errorf("%w: its MAC does not match the job's team key (an agent of another job, or started with another key)", ErrAuth)
	}
	return h, nil
}
