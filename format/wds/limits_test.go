package wds

import (
	"bytes"
	"fmt"
	"io"
	"runtime"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/internal/hostile"
)

// reasons reads every sample of r: the keys read and, for each failed
// sample, "key: reason".
func reasons(t *testing.T, r *Reader) (keys, failed []string) {
	t.Helper()
	for {
		s, err := r.Next()
		if err == io.EOF {
			return keys, failed
		}
		if se, ok := err.(*SampleError); ok {
			failed = append(failed, se.Key+": "+se.Reason)
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, s.Key)
	}
}

// A 25 KB tar of 12 sparse members of 60 MiB each once took 755 MB to
// read as one sample: sparse members are refused, unread, as a corrupt
// sample, and the shard goes on.
func TestSparseMembersFailTheirSampleUnread(t *testing.T) {
	for _, oldGNU := range []bool{false, true} {
		var b bytes.Buffer
		a := shard(t, sample("a", 10))
		b.Write(a[:len(a)-1024]) // without its end of archive
		bomb := hostile.SparseTar("s", 12, 60<<20, oldGNU)
		b.Write(bomb[:len(bomb)-1024])
		b.Write(shard(t, sample("z", 10)))
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		keys, failed := reasons(t, NewReader(bytes.NewReader(b.Bytes()), 0))
		runtime.ReadMemStats(&after)
		want := []string{"s: member s.m0 is a sparse file (GNU sparse header): a corrupt sample"}
		if !cmp.Equal(keys, []string{"a", "z"}) || !cmp.Equal(failed, want) {
			t.Errorf("oldGNU %v: read %v, failed %q; want a and z read, and %q", oldGNU, keys, failed, want)
		}
		if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
			t.Errorf("oldGNU %v: reading a %d-byte tar allocated %d bytes, want well under 1 MiB", oldGNU, b.Len(), got)
		}
	}
}

// Members each under their cap may add up to more than a sample may hold:
// the sample fails once they do, and the members after that are not read.
func TestSampleOverTheByteCapFailsAlone(t *testing.T) {
	big := Sample{Key: "big", Files: map[string][]byte{}}
	for i := range 6 {
		big.Files[fmt.Sprintf("m%d", i)] = bytes.Repeat([]byte{1}, 400)
	}
	b := shard(t, sample("a", 10), big, sample("z", 10))
	r := NewLimitedReader(bytes.NewReader(b), Limits{MaxMemberBytes: 500, MaxSampleBytes: 1000})
	keys, failed := reasons(t, r)
	want := []string{"big: members add up to 1200 bytes with big.m2, over the 1000-byte per-sample cap"}
	if !cmp.Equal(keys, []string{"a", "z"}) || !cmp.Equal(failed, want) {
		t.Fatalf("read %v, failed %q; want a and z read, and %q", keys, failed, want)
	}
}

func TestSampleOverTheMemberCountCapFailsAlone(t *testing.T) {
	many := Sample{Key: "many", Files: map[string][]byte{}}
	for i := range DefaultMaxSampleMembers + 1 {
		many.Files[fmt.Sprintf("m%03d", i)] = []byte{1}
	}
	b := shard(t, sample("a", 10), many, sample("z", 10))
	keys, failed := reasons(t, NewReader(bytes.NewReader(b), 0))
	want := []string{"many: more than 64 members, over the per-sample cap"}
	if !cmp.Equal(keys, []string{"a", "z"}) || !cmp.Equal(failed, want) {
		t.Fatalf("read %v, failed %q; want a and z read, and %q", keys, failed, want)
	}
	// At the cap is fine.
	delete(many.Files, "m000")
	keys, failed = reasons(t, NewReader(bytes.NewReader(shard(t, many)), 0))
	if !cmp.Equal(keys, []string{"many"}) || len(failed) > 0 {
		t.Fatalf("at the cap: read %v, failed %q", keys, failed)
	}
}

// A member over its cap fails its sample, and the sample's later members
// are skipped unread rather than read and dropped.
func TestOversizeMemberSkipsTheRestOfItsSample(t *testing.T) {
	s := Sample{Key: "k", Files: map[string][]byte{"a": bytes.Repeat([]byte{1}, 5000), "b": bytes.Repeat([]byte{2}, 900)}}
	keys, failed := reasons(t, NewReader(bytes.NewReader(shard(t, s, sample("z", 1))), 1000))
	if !cmp.Equal(keys, []string{"z"}) || len(failed) != 1 || !strings.Contains(failed[0], "member k.a is 5000 bytes, over the 1000-byte cap") {
		t.Fatalf("read %v, failed %q", keys, failed)
	}
}
