package readerstate

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

// Generations is the book of the reader's generations of ranks: a
// generation is the ranks of one run of the trainer (torchrun restarts
// every process of a job at once, each loading the checkpoint). The
// planner (or lone agent) keeps it for the whole team, so that a
// generation's resume is one event however many ranks send it and
// wherever their requests arrive first. It is plain data, changed by
// decide, started and settle; the reader's state holds it under the
// reader's lock (docs/architecture.md).
//
// A rank's resume joins the current generation when the generation
// resumed from the same state with the same world size and the rank has
// not resumed in it yet: it rewinds nothing, so the rank's peers, served
// already, keep their place. A rank resuming a second time in one
// generation (a new process: the client resumes once) starts a new
// generation, which rewinds; so does a resume with another world size,
// or the first resume of an agent's life. A rank new to the generation
// with another state is refused, naming both: ranks of one generation
// loading different checkpoints would get a mixture.
//
// A rank that resumed in the generation before must resume again before
// it takes a part (mustResume): its process is of the old generation (a
// straggler of a dying run, or a rank whose resume joined that run just
// before a peer's started this one), and the parts it took there were
// rewound.
type Generations struct {
	// N counts the generations (rewinds): a part carries the one it was
	// formed for, and a member's part request the one it was admitted in.
	N uint64
	// from is the resume the current generation started with (nil: none
	// yet, or it failed), its result filled in once its replay is asked
	// for (settle).
	from *ResumeRecord
	// resumed are the ranks that resumed in the current generation, each
	// with the id of its request ("": none given, so never a repeat).
	resumed map[int]string
	// earlier are the ranks that resumed in the generation before and
	// not yet in this one.
	earlier map[int]bool
}

// maxGeneration bounds a generation token from a client.
const maxGeneration = 128

// CheckGeneration checks a generation token from a client: printable
// ASCII, at most 128 bytes.
func CheckGeneration(token string) error {
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

// MaxResumeID bounds a forwarded resume's id (NewResumeID makes 16 hex
// digits).
const MaxResumeID = 64

// NewResumeID is a random id for a member's forward of a resume.
func NewResumeID() string {
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

// decide says what a rank's resume is (req.ID: its request's, to answer
// a retry as the first; "" none), without changing the book: a resume
// that fails before it rewinds leaves it as it was.
func (g *Generations) decide(req ResumeRequest) (resumeVerdict, error) {
	st, world, rank := req.State, req.World, req.Rank
	prev, resumed := g.resumed[rank]
	sameRun := g.from != nil && req.Token != "" && req.Token == g.from.Token
	switch {
	case req.ID != "" && resumed && prev == req.ID:
		return resumeJoins, nil // the same request again (a member's retry)
	case g.from == nil:
		return resumeNew, nil
	case req.Token != "" && !sameRun:
		return resumeNew, nil // another launch of the trainer
	case !sameRun && (g.from.World != world || resumed):
		return resumeNew, nil
	case g.from.World != world:
		return 0, fmt.Errorf("%w: rank %d resumes with world size %d, but this generation of ranks (run %.64q) has %d",
			ErrResumeConflict, rank, world, req.Token, g.from.World)
	case !sameState(g.from.State, st):
		return 0, fmt.Errorf("%w: rank %d resumes from %s, but this generation of ranks resumed from %s (ranks %s): "+
			"every rank of a generation must load the same checkpoint", ErrResumeConflict, rank, describeState(st), describeState(g.from.State), g.ranks())
	}
	return resumeJoins, nil
}

// Join records rank's resume in the current generation.
func (g *Generations) Join(rank int, id string) {
	g.resumed[rank] = id
	delete(g.earlier, rank)
}

// start begins a new generation with rank's resume r (its result not
// yet known): the ranks that resumed in the one before must resume again.
func (g *Generations) start(r *ResumeRecord, rank int, id string) {
	g.N++
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
func (g *Generations) settle(r *ResumeRecord) {
	g.from = r
	if r == nil {
		g.resumed = nil
	}
}

// mustResume says why rank may take no part ("" when it may).
func (g *Generations) mustResume(rank int) error {
	if !g.earlier[rank] || g.from == nil {
		return nil
	}
	return fmt.Errorf("%w: rank %d resumed in the generation of ranks before this one, which a rank's new resume from %s started: "+
		"the parts it took there were rewound; load the checkpoint again", ErrResumeConflict, rank, describeState(g.from.State))
}

// ranks lists the ranks that resumed in the current generation.
func (g *Generations) ranks() string {
	rs := make([]string, 0, len(g.resumed))
	for _, r := range slices.Sorted(maps.Keys(g.resumed)) {
		rs = append(rs, fmt.Sprint(r))
	}
	return strings.Join(rs, ",")
}

// DescribeState names a state's place: its step, world size and
// position (a digest of it: a position is up to 64 KiB).
func describeState(st TrainerState) string {
	pos, err := PositionJSON(st.Position)
	var v any
	if err == nil {
		err = json.Unmarshal(pos, &v)
	}
	if err != nil {
		return fmt.Sprintf("epoch %d step %d (world size %d, an unreadable position)", st.Epoch, st.Step, st.WorldSize)
	}
	return fmt.Sprintf("epoch %d step %d (world size %d, position sha256 %.12x)", st.Epoch, st.Step, st.WorldSize, sha256.Sum256([]byte(mustJSON(v))))
}
