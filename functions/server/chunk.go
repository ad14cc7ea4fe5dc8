package server

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/functions/pipeline"
	"github.com/sluice-project/sluice/wire"
)

// chunker packs sample outputs into safetensors chunks of at most max
// bytes. Boundaries depend only on the sequence of outputs, never on
// timing, so a shard processed again yields the same chunks byte for byte
// and a caller that holds some of them recognises them by index.
type chunker struct {
	max                 int
	job                 string
	epoch, shard, index int
	first               int // shard row of the open chunk's first row

	schema []fieldSpec // of the open chunk; nil when empty
	keys   []string
	data   [][]byte // per field, rows appended
	bytes  int      // data bytes in the open chunk
	// keysLen is the length keys will take in the header: JSON-encoded as
	// an array, then escaped again as a string value of the metadata.
	keysLen int
}

type fieldSpec struct {
	name   string
	dtype  safetensors.DType
	shape  []int
	expand *wire.Expansion // sent in the chunk's metadata (wire.MetaExpand)
}

func (a fieldSpec) equal(b fieldSpec) bool {
	return a.name == b.name && a.dtype == b.dtype && slices.Equal(a.shape, b.shape) && a.expand.Equal(b.expand)
}

// chunk is an encoded chunk ready to send.
type chunk struct {
	ref  wire.ChunkRef
	data []byte
	keys []string
}

func newChunker(t wire.ShardTask) *chunker {
	return &chunker{max: t.ChunkMaxBytes, job: t.Job, epoch: t.Epoch, shard: t.Shard}
}

// add appends o and returns the chunk it closed, if adding o would have
// pushed the open chunk over max (or o has other fields than the chunk's
// rows). An output that cannot fit even alone is refused with an error that
// fails that sample.
func (c *chunker) add(o pipeline.Output) (*chunk, error) {
	schema := make([]fieldSpec, len(o.Fields))
	n := 0
	for i, f := range o.Fields {
		schema[i] = fieldSpec{f.Name, f.DType, f.Shape, f.Expand}
		if f.DType.Size() == 0 {
			return nil, fmt.Errorf("output field %s: unsupported dtype %q", f.Name, f.DType)
		}
		if want := safetensors.Elements(f.Shape) * f.DType.Size(); want != len(f.Data) {
			return nil, fmt.Errorf("output field %s: %s%v needs %d bytes, has %d", f.Name, f.DType, f.Shape, want, len(f.Data))
		}
		n += len(f.Data)
	}
	if len(schema) == 0 {
		return nil, fmt.Errorf("output has no fields")
	}
	kl := keyLen(o.Key)
	if alone := sizeBound(schema, kl, n); alone > c.max {
		return nil, fmt.Errorf("output is %d bytes as a chunk of its own, over the %d-byte chunk cap", alone, c.max)
	}
	var closed *chunk
	if len(c.keys) > 0 && (!sameSchema(c.schema, schema) || sizeBound(c.schema, c.keysLen+kl, c.bytes+n) > c.max) {
		var err error
		if closed, err = c.close(); err != nil {
			return nil, err
		}
	}
	if len(c.keys) == 0 {
		c.schema = schema
		c.data = grow(c.data, len(schema))
	}
	for i, f := range o.Fields {
		c.data[i] = append(c.data[i], f.Data...)
	}
	c.keys = append(c.keys, o.Key)
	c.keysLen += kl
	c.bytes += n
	return closed, nil
}

// close encodes the open chunk (nil if it is empty) and starts the next.
func (c *chunker) close() (*chunk, error) {
	if len(c.keys) == 0 {
		return nil, nil
	}
	n := len(c.keys)
	tensors := make([]safetensors.Tensor, len(c.schema))
	for i, f := range c.schema {
		tensors[i] = safetensors.Tensor{Name: f.name, DType: f.dtype, Shape: append([]int{n}, f.shape...), Data: c.data[i]}
	}
	keys, err := json.Marshal(c.keys)
	if err != nil {
		return nil, fmt.Errorf("encoding chunk keys: %w", err)
	}
	ref := wire.ChunkRef{Job: c.job, Epoch: c.epoch, Shard: c.shard, Chunk: c.index}
	meta := map[string]string{
		wire.MetaJob:   c.job,
		wire.MetaEpoch: strconv.Itoa(c.epoch),
		wire.MetaShard: strconv.Itoa(c.shard),
		wire.MetaChunk: strconv.Itoa(c.index),
		wire.MetaFirst: strconv.Itoa(c.first),
		wire.MetaKeys:  string(keys),
	}
	if exp := expansions(c.schema); exp != nil {
		if meta[wire.MetaExpand], err = wire.EncodeExpansions(exp); err != nil {
			return nil, err
		}
	}
	data, err := safetensors.Encode(tensors, meta)
	if err != nil {
		return nil, fmt.Errorf("encoding chunk %s: %w", ref, err)
	}
	if len(data) > c.max {
		// sizeBound is an upper bound; this would be a bug in it.
		return nil, fmt.Errorf("chunk %s is %d bytes, over the %d-byte cap", ref, len(data), c.max)
	}
	out := &chunk{ref: ref, data: data, keys: c.keys}
	c.index++
	c.first += n
	c.schema, c.keys, c.bytes, c.keysLen = nil, nil, 0, 0
	for i := range c.data {
		c.data[i] = c.data[i][:0] // Encode copied them
	}
	return out, nil
}

// expansions are the schema's fields' expansions by name (nil: none).
func expansions(schema []fieldSpec) map[string]*wire.Expansion {
	var m map[string]*wire.Expansion
	for _, f := range schema {
		if f.expand != nil {
			if m == nil {
				m = map[string]*wire.Expansion{}
			}
			m[f.name] = f.expand
		}
	}
	return m
}

func sameSchema(a, b []fieldSpec) bool {
	return slices.EqualFunc(a, b, fieldSpec.equal)
}

// sizeBound bounds the encoded size of a chunk: the
// 8-byte length, the JSON header and the data. The header is bounded
// rather than built, so adding a sample costs O(1); it overestimates by a
// few dozen bytes per tensor.
func sizeBound(schema []fieldSpec, keysLen, dataBytes int) int {
	const digits = 20 // of any int
	h := 2            // the braces
	// "__metadata__":{"job":"...","epoch":"..","shard":"..","chunk":"..","keys":"[...]"}
	h += len(`"__metadata__":{"job":"","epoch":"","shard":"","chunk":"","first":"","keys":"[]"},`) + 5*digits + 2*64 + keysLen
	for _, f := range schema {
		// "name":{"dtype":"U8","shape":[n,...],"data_offsets":[a,b]},
		h += len(`"":{"dtype":"","shape":[],"data_offsets":[,]},`) + 6*len(f.name) + len(f.dtype) + (len(f.shape)+1)*(digits+1) + 2*digits
		if f.expand != nil {
			// ,"expand":"{\"name\":{\"dtype\":\"F32\",\"lut\":\"BASE64\"}}": base64
			// needs no escaping; the name is escaped twice.
			h += 64 + 12*len(f.name) + 2*len(f.expand.DType) + base64.StdEncoding.EncodedLen(len(f.expand.LUT))
		}
	}
	h += 7 // alignment padding
	return 8 + h + dataBytes
}

// keyLen is what one key adds to the keys metadata value: its JSON string,
// escaped again inside the metadata string, plus a separating comma.
func keyLen(key string) int {
	inner, _ := json.Marshal(key)
	outer, _ := json.Marshal(string(inner))
	return len(outer) - 2 + 1
}

func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}
