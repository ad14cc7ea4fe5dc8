package wds

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func shard(t *testing.T, samples ...Sample) []byte {
	t.Helper()
	var b bytes.Buffer
	w := NewWriter(&b)
	for _, s := range samples {
		if err := w.Write(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

type got struct {
	keys   []string
	failed []string
}

func readAll(t *testing.T, r *Reader) got {
	t.Helper()
	var g got
	for {
		s, err := r.Next()
		if err == io.EOF {
			return g
		}
		var se *SampleError
		if errors.As(err, &se) {
			g.failed = append(g.failed, se.Key)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		g.keys = append(g.keys, s.Key)
	}
}

func sample(key string, n int) Sample {
	return Sample{Key: key, Files: map[string][]byte{"jpg": bytes.Repeat([]byte{1}, n), "cls": []byte("3")}}
}

func TestReaderGroupsMembersByKey(t *testing.T) {
	b := shard(t, sample("a/000001", 10), sample("a/000002", 20))
	r := NewReader(bytes.NewReader(b), 0)
	s, err := r.Next()
	if err != nil || s.Key != "a/000001" || len(s.Files["jpg"]) != 10 || string(s.Files["cls"]) != "3" {
		t.Fatalf("first sample = %+v, %v", s, err)
	}
	g := readAll(t, r)
	if len(g.keys) != 1 || g.keys[0] != "a/000002" || len(g.failed) != 0 {
		t.Fatalf("rest = %+v", g)
	}
}

func TestReaderOversizeMemberFailsOnlyItsSample(t *testing.T) {
	b := shard(t, sample("k1", 10), sample("k2", 5000), sample("k3", 10))
	g := readAll(t, NewReader(bytes.NewReader(b), 1000))
	if len(g.keys) != 2 || g.keys[0] != "k1" || g.keys[1] != "k3" {
		t.Fatalf("keys = %v", g.keys)
	}
	if len(g.failed) != 1 || g.failed[0] != "k2" {
		t.Fatalf("failed = %v", g.failed)
	}
}

func TestReaderTruncatedShardNamesTheSample(t *testing.T) {
	b := shard(t, sample("k1", 600), sample("k2", 600))
	// Cut inside k2's jpg body (members sorted: cls then jpg).
	cut := bytes.LastIndex(b, bytes.Repeat([]byte{1}, 600)) + 300
	g := readAll(t, NewReader(bytes.NewReader(b[:cut]), 0))
	if len(g.keys) != 1 || g.keys[0] != "k1" {
		t.Fatalf("keys = %v", g.keys)
	}
	if len(g.failed) != 1 || g.failed[0] != "k2" {
		t.Fatalf("failed = %v", g.failed)
	}
}

func TestSplitKey(t *testing.T) {
	for in, want := range map[string][2]string{
		"dir/000001.jpg":   {"dir/000001", "jpg"},
		"dir.v2/x.seg.png": {"dir.v2/x", "seg.png"},
		"noext":            {"noext", ""},
	} {
		k, e := SplitKey(in)
		if k != want[0] || e != want[1] {
			t.Errorf("SplitKey(%q) = %q,%q want %q,%q", in, k, e, want[0], want[1])
		}
	}
}
