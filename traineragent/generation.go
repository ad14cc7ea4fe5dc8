package traineragent

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// generations is the book of the reader's generations of ranks: a
// generation is the ranks of one run of the trainer (torchrun restarts
// every process of a job at once, each loading the checkpoint). The
// planner (or lone agent) keeps it for the whole team, so that a
// generation's resume is one event however many ranks send it and
// wherever their requests arrive first. It is plain data, changed by
// decide, started and settle; the reader's state holds it under the
// reader's lock (docs/architecture.md).
//
// When the client names the trainer's run (a generation token, the same
// for every rank of one launch), that decides: a resume of the current
// generation's run joins it (refused, naming both, if its state or world
// size is another), one of another run starts a new generation, which
// rewinds. Without a token, the book tells by which ranks resumed: a
// rank's resume joins the current generation when the generation resumed
// from the same state with the same world size and the rank has not
// resumed in it yet: it rewinds nothing, so the rank's peers, served
// already, keep their place. A rank resuming a second time in one
// generation (a new process: the client resumes once) starts a new
// generation; so does a resume with another world size, or the first
// resume of an agent's life. A rank new to the generation with another
// state is refused, naming both: ranks of one generation loading
// different checkpoints would get a mixture. What no token can tell: a
// rank of a new launch whose resume comes before any of its peers' that
// resumed in the generation before, while that generation's ranks (of a
// launch killed during its resume) had not all resumed, joins the dying
// generation; tokens make that exact.
//
// A rank that resumed in the generation before must resume again before
// it takes a part (mustResume): its process is of the old generation (a
// straggler of a dying run, or a rank whose resume joined that run just
// before a peer's started this one), and the parts it took there were
// rewound.
type generations struct {
	// n counts the generations (rewinds): a part carries the one it was
	// formed for, and a member's part request the one it was admitted in.
	n uint64
	// from is the resume the current generation started with (nil: none
	// yet, or it failed), its result filled in once its replay is asked
	// for (settle).
	from *resumeRecord
	// resumed are the ranks that resumed in the current generation, each
	// with the id of its request ("": none given, so never a repeat).
	resumed map[int]string
	// earlier are the ranks that resumed in the generation before and
	// not yet in this one.
	earlier map[int]bool
}

// maxGeneration bounds a generation token from a client.
const maxGeneration = 128

// checkGeneration checks a generation token from a client: printable
// ASCII, at most maxGeneration bytes.
func checkGeneration(token string) error {
	if len(token) > maxGeneration {
		return fmt.Errorf("%w: a generation of %d bytes: want at most %d", ErrBadState, len(token), maxGeneration)
	}
	for i := 0; i < len(token); i++ {
		if c := token[i]; c < 0x21 || c > 0x7e {
			return fmt.Errorf("%w: a generation with byte %#x: want printable ASCII", ErrBadState, c)
		}
	}
	return nil
}

// maxResumeID bounds a forwarded resume's id (newResumeID makes 16 hex
// digits).
const maxResumeID = 64

// newResumeID is a random id for a member's forward of a resume.
func newResumeID() string {
	var b [8]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}

// resumeVerdict is what a rank's resume is to the book.
type resumeVerdict int

const (
	resumeJoins resumeVerdict = iota // it joins the current generation: answered with its record
	resumeNew                        // it starts a new generation: the reader rewinds
)

// decide says what a rank's resume is (req.id: its request's, to answer
// a retry as the first; "" none), without changing the book: a resume
// that fails before it rewinds leaves it as it was.
func (g *generations) decide(req resumeRequest) (resumeVerdict, error) {
	st, world, rank := req.state, req.world, req.rank
	prev, resumed := g.resumed[rank]
	sameRun := g.from != nil && req.token != "" && req.token == g.from.token
	switch {
	case req.id != "" && resumed && prev == req.id:
		return resumeJoins, nil // the same request again (a member's retry)
	case g.from == nil:
		return resumeNew, nil
	case req.token != "" && !sameRun:
		return resumeNew, nil // another launch of the trainer
	case !sameRun && (g.from.world != world || resumed):
		return resumeNew, nil
	case g.from.world != world:
		return 0, fmt.Errorf("%w: rank %d resumes with world size %d, but this generation of ranks (run %.64q) has %d",
			ErrResumeConflict, rank, world, req.token, g.from.world)
	case !sameState(g.from.state, st):
		return 0, fmt.Errorf("%w: rank %d resumes from %s, but this generation of ranks resumed from %s (ranks %s): "+
			"every rank of a generation must load the same checkpoint", ErrResumeConflict, rank, describeState(st), describeState(g.from.state), g.ranks())
	}
	return resumeJoins, nil
}

// join records rank's resume in the current generation.
func (g *generations) join(rank int, id string) {
	g.resumed[rank] = id
	delete(g.earlier, rank)
}

// start begins a new generation with rank's resume r (its result not
// yet known): the ranks that resumed in the one before must resume again.
func (g *generations) start(r *resumeRecord, rank int, id string) {
	g.n++
	g.earlier = map[int]bool{}
	for q := range g.resumed {
		if q != rank {
			g.earlier[q] = true
		}
	}
	g.from = r
	g.resumed = map[int]string{rank: id}
}

// settle ends the current generation's resume: r is its record with its
// result, nil if it failed (the next resume starts a generation again).
func (g *generations) settle(r *resumeRecord) {
	g.from = r
	if r == nil {
		g.resumed = nil
	}
}

// mustResume says why rank may take no part ("" when it may).
func (g *generations) mustResume(rank int) error {
	if !g.earlier[rank] || g.from == nil {
		return nil
	}
	return fmt.Errorf("%w: rank %d resumed in the generation of ranks before this one, which a rank's new resume from %s started: "+
		"the parts it took there were rewound; load the checkpoint again", ErrResumeConflict, rank, describeState(g.from.state))
}

// ranks lists the ranks that resumed in the current generation.
func (g *generations) ranks() string {
	rs := make([]string, 0, len(g.resumed))
	for _, r := range slices.Sorted(maps.Keys(g.resumed)) {
		rs = append(rs, fmt.Sprint(r))
	}
	return strings.Join(rs, ",")
}

// describeState names a state's place: its step, world size and
// position (a digest of it: a position is up to 64 KiB).
func describeState(st State) string {
	pos, err := positionJSON(st.Position)
	var v any
	if err == nil {
		err = json.Unmarshal(pos, &v)
	}
	if err != nil {
		return fmt.Sprintf("epoch %d step %d (world size %d, an unreadable position)", st.Epoch, st.Step, st.WorldSize)
	}
	return fmt.Sprintf("epoch %d step %d (world size %d, position sha256 %.12x)", st.Epoch, st.Step, st.WorldSize, sha256.Sum256([]byte(mustJSON(v))))
}
