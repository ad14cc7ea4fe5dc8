package wire

import "encoding/json"

// The team protocol (TeamProtocol): what the agents of a reader's team
// (`sluice agent --ranks`) send on TeamSubject(job, reader, op), a member
// asking its reader's planner (the agent of rank 0), and the planner's
// replies. Each message travels in the envelope the trainer agent puts in
// its NATS headers (TeamHeader*): who sent it, the session of its join, a
// sequence number, the planner run that answers, and its sender node's
// seal (NodeHeader*: the node's certified key's signature over all of
// these and the body). No preprocessed byte crosses it.
const (
	TeamOpJoin   = "join"   // TeamJoin: a member serves Ranks
	TeamOpNotes  = "notes"  // TeamNotes: chunks it received (row counts), shard ends, shards failed for good
	TeamOpPart   = "part"   // TeamPartRequest: a rank's next part (a long poll)
	TeamOpResume = "resume" // TeamResume: a rank resumes from a checkpoint
	TeamOpStatus = "status" // TeamStatus: which of its shards are settled, and whether to take more
)

// The envelope's NATS headers.
const (
	TeamHeaderVersion = "Sluice-Team"         // TeamProtocol
	TeamHeaderMember  = "Sluice-Team-Member"  // the member's name
	TeamHeaderSession = "Sluice-Team-Session" // a join: the member's nonce; else the session its join got
	TeamHeaderSeq     = "Sluice-Team-Seq"     // the member's sequence number, echoed in the reply
	TeamHeaderPlanner = "Sluice-Team-Planner" // a reply: the planner run that answers
	TeamHeaderRefused = "Sluice-Team-Refused" // an unsigned refusal of a message whose envelope failed
)

// TeamJoin asks to serve ranks of a world.
type TeamJoin struct {
	Ranks    []int `json:"ranks"`
	World    int   `json:"world"`
	DropLast bool  `json:"drop_last"`
}

// TeamNotes tells the planner what a member received.
type TeamNotes struct {
	Notes []TeamNote `json:"notes"`
}

// TeamNote is a chunk a member received, or (Chunk -1) a shard's end or
// (Reason set) its failure.
type TeamNote struct {
	Epoch   int         `json:"epoch"`
	Shard   int         `json:"shard"`
	Chunk   int         `json:"chunk"`
	First   *int        `json:"first,omitempty"` // its first shard row (absent from older members: after their last chunk)
	Rows    int         `json:"rows,omitempty"`  // its samples (their keys stay with the member)
	Schema  *TeamSchema `json:"schema,omitempty"`
	Corrupt string      `json:"corrupt,omitempty"`
	End     *ShardEnd   `json:"end,omitempty"`    // a shard's end
	Reason  string      `json:"reason,omitempty"` // why the shard failed for good
	Key     string      `json:"key,omitempty"`    // the failed shard's key
}

// TeamSchema is a chunk's tensor layout: names, safetensors dtypes and
// the shape of one row of each tensor.
type TeamSchema struct {
	Names  []string `json:"names"`
	DTypes []string `json:"dtypes"`
	Shapes [][]int  `json:"shapes"`
}

// TeamPartRequest asks for a rank's next part.
type TeamPartRequest struct {
	Rank     int   `json:"rank"`
	World    int   `json:"world"`
	DropLast *bool `json:"drop_last,omitempty"`
}

// TeamResume forwards a rank's resume: State is the trainer's state (the
// agent's HTTP API's resume body).
type TeamResume struct {
	State json.RawMessage `json:"state"`
	World int             `json:"world"`
	// Rank is the rank that resumes: a generation's resume is one event
	// for the team, each of its ranks joining it once (TeamProtocol 2).
	Rank int `json:"rank"`
	// ID names the forward: the planner answers a copy of it (the member
	// asks again when no answer came) as it answered the first.
	ID string `json:"id"`
	// Generation is the trainer's run the rank is of
	// (AgentParamGeneration; "" none).
	Generation string `json:"generation,omitempty"`
}

// TeamStatus asks which of the shards a member holds output of are
// settled.
type TeamStatus struct {
	Held [][2]int `json:"held,omitempty"` // (epoch, shard)
}

// TeamReply answers every team request.
type TeamReply struct {
	Planner string `json:"planner"`
	Status  string `json:"status"`
	Error   string `json:"error,omitempty"`
	// join: the session the member's further requests carry
	Session string `json:"session,omitempty"`
	// notes: those that were copies, those refused (index: why), and
	// those deferred (the member holds too much at the planner: it tells
	// them again)
	Duplicates []int          `json:"duplicates,omitempty"`
	Refused    map[int]string `json:"refused,omitempty"`
	Deferred   []int          `json:"deferred,omitempty"`
	// notes and status: whether the member should take more tasks
	Want bool `json:"want,omitempty"`
	// status: the shards of those held that are settled
	Complete [][2]int `json:"complete,omitempty"`
	// part:
	Part *TeamPart `json:"part,omitempty"`
	// resume: the result (the agent's HTTP API's resume answer) and the
	// generation of ranks it started (see TeamPart.Gen)
	Resume json.RawMessage `json:"resume,omitempty"`
	Gen    uint64          `json:"gen,omitempty"`
}

// TeamPart is a member rank's part: its rows as spans of chunks (the
// member reads their keys from the chunks it holds or has produced again).
type TeamPart struct {
	Epoch    int             `json:"epoch"`
	Step     int             `json:"step"`
	Last     bool            `json:"last"`
	Failed   int64           `json:"failed,omitempty"` // samples of the epoch not in it (its last step)
	World    int             `json:"world"`
	Position json.RawMessage `json:"position"`
	Rows     int             `json:"rows"`
	Spans    []TeamSpan      `json:"spans"`
	Schema   *TeamSchema     `json:"schema,omitempty"`
	// Gen is the planner's generation of ranks (resumes) the part was
	// formed for.
	Gen uint64 `json:"gen"`
}

// TeamSpan is N rows of a chunk from its row Lo.
type TeamSpan struct {
	Shard int  `json:"shard"`
	Chunk int  `json:"chunk"`
	Lo    int  `json:"lo"`
	N     int  `json:"n"`
	Row   *int `json:"row,omitempty"` // the shard row of Lo (absent from older planners)
}
