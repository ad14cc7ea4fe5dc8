package assembly

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"

	"github.com/sluice-project/sluice/format/safetensors"
	"github.com/sluice-project/sluice/wire"
)

// Encode writes b as a safetensors file with the job, epoch and keys in its metadata.
func (b Batch) Encode(job string) ([]byte, error) {
	b.Materialize()
	meta, err := b.Metadata(job)
	if err != nil {
		return nil, err
	}
	return safetensors.Encode(b.Tensors, meta)
}

// Metadata is the metadata of b's safetensors file: the job, the epoch
// and the keys.
func (b Batch) Metadata(job string) (map[string]string, error) {
	keys, err := json.Marshal(b.Keys)
	if err != nil {
		return nil, fmt.Errorf("encoding batch keys: %w", err)
	}
	meta := map[string]string{
		wire.MetaBatchJob:   job,
		wire.MetaBatchEpoch: strconv.Itoa(b.Epoch),
		wire.MetaBatchKeys:  string(keys),
	}
	if b.Sources != nil {
		sources, err := json.Marshal(b.Sources)
		if err != nil {
			return nil, fmt.Errorf("encoding batch sources: %w", err)
		}
		meta[wire.MetaBatchSources] = string(sources)
	}
	return meta, nil
}

// DecodeBatch reads a batch written by Batch.Encode; tensors alias data and
// come sorted by name.
func DecodeBatch(data []byte) (Batch, error) {
	f, err := safetensors.Decode(data)
	if err != nil {
		return Batch{}, err
	}
	var b Batch
	if b.Epoch, err = strconv.Atoi(f.Metadata[wire.MetaBatchEpoch]); err != nil {
		return Batch{}, fmt.Errorf("batch metadata %q: %w", wire.MetaBatchEpoch, err)
	}
	if err := json.Unmarshal([]byte(f.Metadata[wire.MetaBatchKeys]), &b.Keys); err != nil {
		return Batch{}, fmt.Errorf("batch metadata %q: %w", wire.MetaBatchKeys, err)
	}
	if src, ok := f.Metadata[wire.MetaBatchSources]; ok {
		if err := json.Unmarshal([]byte(src), &b.Sources); err != nil || len(b.Sources) != len(b.Keys) {
			return Batch{}, fmt.Errorf("batch metadata %q: want one source per key: %v", wire.MetaBatchSources, err)
		}
	}
	names := make([]string, 0, len(f.Tensors))
	for name := range f.Tensors {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		b.Tensors = append(b.Tensors, f.Tensors[name])
	}
	return b, nil
}

// Header is the start of b's safetensors file with meta, and the file's size.
func (b *Batch) Header(meta map[string]string) (head []byte, size int, err error) {
	lengths := make([]int, len(b.Tensors))
	for j := range b.Tensors {
		lengths[j] = b.DataLen(j)
	}
	return safetensors.HeaderLengths(b.Tensors, lengths, meta)
}

// WriteFile writes b's file, head then the tensors' data, straight from
// the chunks it came in; an expanded run goes through a buffer of about
// expandBuffer bytes (it stays in the core's cache between the two).
func (b *Batch) WriteFile(w io.Writer, head []byte) error {
	_, err := w.Write(head)
	var buf []byte
	for j, t := range b.Tensors {
		rowBytes := rowElems(t)
		for _, run := range b.Data(j) {
			if err != nil {
				return err
			}
			if run.Expand == nil {
				_, err = w.Write(run.Data)
				continue
			}
			rows := max(1, expandBuffer/(rowBytes*run.Expand.Size())) * rowBytes
			for src := run.Data; len(src) > 0 && err == nil; {
				part := Run{src[:min(rows, len(src))], run.Expand}
				if n := part.Len(); cap(buf) < n {
					buf = make([]byte, n)
				}
				_, err = w.Write(buf[:part.put(buf, rowBytes)])
				src = src[len(part.Data):]
			}
		}
	}
	return err
}

// expandBuffer is the size of the buffer WriteFile expands runs into.
const expandBuffer = 1 << 20
