package teamproto

import (
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go"

	"github.com/sluice-project/sluice/wire"
)

// The team's envelope: every team request and reply carries, in NATS
// headers, who sent it (the member's name and the session its join
// opened), a sequence number, the planner run that answers, and the
// sending node's seal (wire.NodeSeal: its certified key's signature over
// all of these and the body). A message is checked before its body is
// parsed: a holder of another job's credentials can neither forge nor
// replay one; within the job a request naming member M must be sealed by
// node M (a node cannot act as another), and carry M's session. See
// docs/design-multi-agent.md.
const (
	KindRequest = "request"
	KindReply   = "reply"

	// maxTeamHeader bounds each header value of a team message.
	maxTeamHeader = 256
)

// Auth seals and checks a reader's team messages.
type Auth struct {
	// Node seals what this agent sends; Check checks what it receives
	// against the job record's node key.
	Node        *wire.NodeIdentity
	Check       *wire.NodeVerifier
	Job, Reader string
}

// NewAuth seals reader of job's team messages as node and checks them
// with check.
func NewAuth(node *wire.NodeIdentity, check *wire.NodeVerifier, job, reader string) *Auth {
	return &Auth{Node: node, Check: check, Job: job, Reader: reader}
}

// Head is a team message's envelope. Node is the node that sealed it
// (Open sets it).
type Head struct {
	Op, Member, Session, Planner string
	Seq                          uint64
	Node                         string
}

// parts are the envelope's fields a seal covers, with the message's kind.
func (t *Auth) parts(kind string, h Head) [][]byte {
	return [][]byte{[]byte(wire.TeamProtocol), []byte(kind), []byte(t.Reader), []byte(h.Op), []byte(h.Member),
		[]byte(h.Session), []byte(h.Planner), strconv.AppendUint(nil, h.Seq, 10)}
}

// Seal sets m's envelope headers for h, sealed by the agent's node over
// m.Data.
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
	t.Node.SealFor(wire.SealTeam, t.parts(kind, h), m.Data).SetHeader(m.Header)
}

// ErrAuth marks a team message refused by its envelope.
var ErrAuth = errors.New("team message refused")

// ErrOtherNode marks a request refused because the member it names is not
// the node that sealed it: a node of the job acting as another.
var ErrOtherNode = errors.New("a node acting as another")

// NodeRefusal is the reason label (the agent's node_refused series) of a
// message of kind refused for its node seal ("" for another refusal).
func NodeRefusal(err error, kind string) string {
	switch {
	case errors.Is(err, ErrOtherNode) && kind == KindReply:
		return "reply_other_node"
	case errors.Is(err, ErrOtherNode):
		return "team_other_node"
	case errors.Is(err, wire.ErrNodeSeal):
		return "team_seal"
	}
	return ""
}

// Open checks m's envelope as a message of kind for op and returns it.
// Nothing of the body is read. A request must be sealed by the node it
// names as its member (ErrOtherNode).
func (t *Auth) Open(m *nats.Msg, kind, op string) (Head, error) {
	h := Head{Op: op}
	if m.Header == nil {
		return h, fmt.Errorf("%w: no team envelope (an agent of another version, or not an agent)", ErrAuth)
	}
	for k := range m.Header {
		if len(m.Header.Get(k)) > maxTeamHeader {
			return h, fmt.Errorf("%w: header %.64s of %d bytes: want at most %d", ErrAuth, k, len(m.Header.Get(k)), maxTeamHeader)
		}
	}
	if v := m.Header.Get(wire.TeamHeaderVersion); v != wire.TeamProtocol {
		return h, fmt.Errorf("%w: team protocol %.16q, want %s: every agent of a team must run the same version of sluice", ErrAuth, v, wire.TeamProtocol)
	}
	h.Member = m.Header.Get(wire.TeamHeaderMember)
	h.Session = m.Header.Get(wire.TeamHeaderSession)
	h.Planner = m.Header.Get(wire.TeamHeaderPlanner)
	seq := m.Header.Get(wire.TeamHeaderSeq)
	var err error
	if h.Seq, err = strconv.ParseUint(seq, 10, 64); err != nil {
		return h, fmt.Errorf("%w: sequence %.24q", ErrAuth, seq)
	}
	node, err := t.Check.Verify(wire.SealOfHeader(m.Header), wire.SealTeam, t.parts(kind, h), m.Data)
	if err != nil {
		return h, fmt.Errorf("%w: %w", ErrAuth, err)
	}
	h.Node = node
	if kind == KindRequest && h.Member != node {
		return h, fmt.Errorf("%w: %w: a request naming member %.64q sealed by node %s", ErrAuth, ErrOtherNode, h.Member, node)
	}
	return h, nil
}
