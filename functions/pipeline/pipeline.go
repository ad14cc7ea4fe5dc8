package pipeline

import (
	"context"
	"encoding/binary"
	"hash/fnv"
	"math/rand/v2"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/functions/image"
	"github.com/sluice-project/sluice/wire"
)

// Field is one tensor of one sample's output, without a batch dimension.
// Data holds the elements little-endian, row-major, as safetensors does.
type Field struct {
	Name  string
	DType safetensors.DType
	Shape []int
	Data  []byte
	// Expand, when set, is what the receiver applies to Data (U8
	// [H,W,C]) to get the field's value: see Options.DeferExpansion.
	Expand *wire.Expansion
}

// Output is what a pipeline makes of one sample. Its fields come in a fixed
// order per pipeline, which becomes the tensor order of a chunk.
type Output struct {
	Key    string
	Fields []Field
}

// Pipeline preprocesses samples. Implementations are safe for concurrent use.
type Pipeline interface {
	Name() string
	// Process turns one sample into its output; an error fails that sample only
	// (it becomes a wire.FailedSample with err.Error() as reason).
	Process(s wds.Sample, seed uint64) (Output, error)
	// ProcessContext is Process for a caller that may stop waiting: a
	// decode waiting for room in Options.DecodeBudget gives up when ctx
	// ends (Process waits as long as it takes).
	ProcessContext(ctx context.Context, s wds.Sample, seed uint64) (Output, error)
}

// Options tune how a pipeline is built; they are the replica's settings,
// not the job's (a job's choices are in its pipeline spec).
type Options struct {
	// MaxPixels caps a decoded image; 0 means image.DefaultMaxPixels.
	MaxPixels int
	// DecodeBudget bounds the bytes decoded images hold at once, across
	// every pipeline given the same budget: a replica's pipelines share
	// one, sized from its memory limit. nil bounds each image only
	// (MaxPixels).
	DecodeBudget *image.Budget
	// VocabDir is the only directory vocab files are read from: a
	// wordpiece op names a file within it. "" reads none (builtin only).
	VocabDir string
	// Tokenizers shares the BPE tokenizers loaded from VocabDir among
	// pipelines; nil loads each pipeline's own.
	Tokenizers *TokenizerCache
	// DeferExpansion leaves an op whose work only widens bytes (normalize:
	// a table per channel from uint8 to float) to the receiver: its field
	// is the uint8 [H,W,C] it reads, with the table (Field.Expand). A
	// replica sets it for a task whose sender applies expansions
	// (wire.ShardTask.Expand): the wire then carries a quarter of the bytes.
	DeferExpansion bool

	// check validates without reading the files a spec names (Check).
	check bool
	// prev is the op before the one being built, when every op before it
	// built (prevBuilt): pack takes its EOS from the bpe op's tokenizer.
	prev      stage
	prevBuilt bool
}

// SampleSeed derives the seed of one sample's randomness: 64-bit FNV-1a
// over jobSeed and epoch (each 8 bytes little-endian) and the key's bytes,
// then the splitmix64 finaliser so that nearby inputs (epoch 1 vs 2, key
// "0001" vs "0002") give unrelated seeds. It depends on nothing else — not
// the replica, the shard's position or the time — so reprocessing a shard
// reproduces every sample exactly. Changing this function changes every
// job's augmentations; treat it as part of the wire format.
func SampleSeed(jobSeed uint64, epoch int, key string) uint64 {
	h := fnv.New64a()
	var b [16]byte
	binary.LittleEndian.PutUint64(b[:8], jobSeed)
	binary.LittleEndian.PutUint64(b[8:], uint64(int64(epoch)))
	h.Write(b[:])
	h.Write([]byte(key))
	return mix64(h.Sum64())
}

// mix64 is splitmix64's finaliser.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// rngStream is the second PCG word; fixed, so the seed alone decides the draws.
const rngStream = 0x736c75696365 // "sluice"

// newRand is the only source of randomness pipelines may use.
func newRand(seed uint64) *rand.Rand { return rand.New(rand.NewPCG(seed, rngStream)) }
