package pipeline

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/functions/image"
)

// stage is a built op. apply reads the value its input type names from st
// and leaves its output there; validation guarantees the types line up.
type stage interface {
	apply(st *state) error
}

// compiled is a validated pipeline: its stages in order, run over a
// pooled per-call state, so Process is safe for concurrent use and
// allocates little more than the output.
type compiled struct {
	name      string
	ops       []string
	stages    []stage
	label     Label
	maxPixels int
	budget    *image.Budget
	fieldCap  int
	// decodeOwner[i] is the op whose lazy decode stage i may carry out
	// (-1: none); profiling charges the decoding time to it.
	decodeOwner []int
	states      sync.Pool // of *state
	// pack is the pack op's options when the pipeline ends with one.
	pack *PackOptions
}

// PackingOf reports whether p packs (ends with a pack op), and how: its
// Process then gives each document's ids (DocIDs reads them), which the
// caller feeds, in shard order, to a Packer made with these options.
func PackingOf(p Pipeline) (PackOptions, bool) {
	c, ok := p.(*compiled)
	if !ok || c.pack == nil {
		return PackOptions{}, false
	}
	return *c.pack, true
}

// Profiler is implemented by every pipeline this package builds: it runs
// a sample like Process and adds the time each op took to spent (one
// entry per op of OpNames). An image decoded lazily by the op after
// decode is charged to decode. `sluice bench ops` uses it.
type Profiler interface {
	Pipeline
	OpNames() []string
	ProcessProfiled(s wds.Sample, seed uint64, spent []time.Duration) (Output, error)
}

func (c *compiled) Name() string { return c.name }

// OpNames lists the pipeline's ops in order.
func (c *compiled) OpNames() []string { return append([]string(nil), c.ops...) }

func (c *compiled) Process(s wds.Sample, seed uint64) (Output, error) {
	return c.process(context.Background(), s, seed, nil)
}

func (c *compiled) ProcessContext(ctx context.Context, s wds.Sample, seed uint64) (Output, error) {
	return c.process(ctx, s, seed, nil)
}

func (c *compiled) ProcessProfiled(s wds.Sample, seed uint64, spent []time.Duration) (Output, error) {
	if len(spent) < len(c.stages) {
		spent = make([]time.Duration, len(c.stages)) // wrong size: time nothing rather than panic
	}
	return c.process(context.Background(), s, seed, spent)
}

func (c *compiled) process(ctx context.Context, s wds.Sample, seed uint64, spent []time.Duration) (out Output, err error) {
	st := c.states.Get().(*state)
	defer c.release(st)
	i := 0
	// Hostile bytes must fail their sample, not the replica (which would
	// fail the shard again on every redelivery).
	defer func() {
		if p := recover(); p != nil {
			out, err = Output{}, fmt.Errorf("%s: panicked: %v", c.ops[min(i, len(c.ops)-1)], p)
		}
	}()
	st.start(ctx, s, seed, c.maxPixels, c.budget, spent != nil)
	st.fields = make([]Field, 0, c.fieldCap)
	for ; i < len(c.stages); i++ {
		stg := c.stages[i]
		var t0 time.Time
		if spent != nil {
			t0 = time.Now()
			st.decodeTime = 0
		}
		if err := stg.apply(st); err != nil {
			return Output{}, err
		}
		if spent != nil {
			d := time.Since(t0)
			if o := c.decodeOwner[i]; o >= 0 && o != i {
				spent[o] += st.decodeTime
				d -= st.decodeTime
			}
			spent[i] += d
		}
	}
	if !c.label.None() {
		f, err := readLabel(st, c.label)
		if err != nil {
			return Output{}, err
		}
		st.fields = append(st.fields, f)
	}
	return Output{Key: s.Key, Fields: st.fields}, nil
}

func (c *compiled) release(st *state) {
	st.finish()
	st.trim()
	c.states.Put(st)
}

// pooledBufferBytes bounds each image buffer a pooled state keeps between
// calls (16 MiB: a 2,300 x 2,300 RGB image). Without it one huge image
// would pin up to 3 x MaxPixels x 3 bytes in the pool for good.
const pooledBufferBytes = 16 << 20

// trim drops buffers grown past pooledBufferBytes.
func (st *state) trim() {
	for _, b := range []*image.RGB{&st.decodeBuf, &st.work[0], &st.work[1]} {
		if cap(b.Pix) > pooledBufferBytes {
			*b = image.RGB{}
		}
	}
}

// state is one Process call's working values. Its image buffers survive
// in the pool between calls; references to the sample do not.
type state struct {
	ctx       context.Context
	sample    wds.Sample
	pcg       rand.PCG
	rng       *rand.Rand
	maxPixels int
	// budget is the decode budget; unreserve gives back what this
	// sample's decode reserved of it, when the sample is done.
	budget    *image.Budget
	unreserve func()

	// The encoded image (encoded_image), while encoded is set.
	encoded    bool
	enc        []byte
	member     string
	srcW, srcH int

	// The decoded image (image_u8): one of the buffers below.
	img       *image.RGB
	decodeBuf image.RGB
	work      [2]image.RGB

	// Text (text): one string, or segments from a JSON list.
	text     string
	segments []string
	// A document's ids (ids), in a buffer kept between calls.
	ids []int32
	// The sample's JSON object, parsed once for the text op and the label.
	json       map[string]json.RawMessage
	jsonMember string

	fields []Field

	profile    bool
	decodeTime time.Duration
}

func newState() *state {
	st := &state{}
	st.rng = rand.New(&st.pcg)
	return st
}

// start readies st for one sample. The generator is reseeded as newRand
// would make it, so a pooled state draws exactly what a fresh one does.
func (st *state) start(ctx context.Context, s wds.Sample, seed uint64, maxPixels int, budget *image.Budget, profile bool) {
	st.ctx = ctx
	st.sample = s
	st.pcg.Seed(seed, rngStream)
	st.maxPixels = maxPixels
	st.budget = budget
	st.profile = profile
}

func (st *state) finish() {
	if st.unreserve != nil {
		st.unreserve()
		st.unreserve = nil
	}
	st.ctx, st.budget = nil, nil
	st.sample = wds.Sample{}
	st.encoded, st.enc, st.member, st.img = false, nil, "", nil
	clear(st.segments) // the strings alias the sample
	st.text, st.segments, st.json, st.jsonMember, st.fields = "", st.segments[:0], nil, "", nil
	st.ids = st.ids[:0]
	if cap(st.ids) > pooledBufferBytes/4 {
		st.ids = nil // a huge document's buffer is not kept
	}
}
