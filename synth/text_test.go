package synth

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/format/lines"
	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/functions/text"
)

// textSample is one generated text sample, whichever the format.
type textSample struct {
	key, text string
	label     int
}

func readText(t *testing.T, s Shard) []textSample {
	t.Helper()
	var out []textSample
	if strings.HasSuffix(s.Name, ".tar") {
		r := wds.NewReader(bytes.NewReader(s.Data), 0)
		for {
			smp, err := r.Next()
			if errors.Is(err, io.EOF) {
				return out
			}
			if err != nil {
				t.Fatal(err)
			}
			label, err := strconv.Atoi(string(smp.Files["cls"]))
			if err != nil || len(smp.Files) != 2 {
				t.Fatalf("%s: members %d, cls %q", smp.Key, len(smp.Files), smp.Files["cls"])
			}
			out = append(out, textSample{smp.Key, string(smp.Files["txt"]), label})
		}
	}
	if !strings.HasSuffix(s.Name, ".jsonl") {
		t.Fatalf("shard name %q", s.Name)
	}
	r := lines.NewReader(bytes.NewReader(s.Data), s.Name, "jsonl", 0)
	for {
		smp, err := r.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		var v struct {
			Text  *string
			Label *int
		}
		d := json.NewDecoder(bytes.NewReader(smp.Files["jsonl"]))
		d.DisallowUnknownFields()
		if err := d.Decode(&v); err != nil || v.Text == nil || v.Label == nil {
			t.Fatalf("%s: %q: %v", smp.Key, smp.Files["jsonl"], err)
		}
		out = append(out, textSample{smp.Key, *v.Text, *v.Label})
	}
}

func TestText(t *testing.T) {
	tk, err := text.NewTokenizer(text.BuiltinVocab(), text.WordPieceOptions{Lowercase: true, StripAccents: true})
	if err != nil {
		t.Fatal(err)
	}
	unk, _ := tk.Vocab().ID(text.UnkToken)
	for _, format := range []string{"", "tar", "jsonl"} {
		o := TextOptions{Samples: 300, Shards: 3, Seed: 5, Format: format}
		a, err := Text(o)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := Text(o)
		o.Seed = 6
		c, _ := Text(o)
		ext := ".tar"
		if format == "jsonl" {
			ext = ".jsonl"
		}
		labels := map[int]int{}
		var keys []string
		words, pieces := 0, 0
		for i, s := range a {
			if want := "shard-00000" + strconv.Itoa(i) + ext; s.Name != want {
				t.Errorf("%q: shard %d named %q, want %q", format, i, s.Name, want)
			}
			if !bytes.Equal(s.Data, b[i].Data) || bytes.Equal(s.Data, c[i].Data) {
				t.Errorf("%q: shard %d: same seed same bytes %v, other seed other bytes %v",
					format, i, bytes.Equal(s.Data, b[i].Data), !bytes.Equal(s.Data, c[i].Data))
			}
			got := readText(t, s)
			if len(got) != s.Samples || s.Samples != 100 {
				t.Errorf("%q: shard %d holds %d samples, says %d, want 100", format, i, len(got), s.Samples)
			}
			for _, smp := range got {
				keys = append(keys, smp.key)
				labels[smp.label]++
				if smp.label < 0 || smp.label >= TextClasses || len(smp.text) < 20 {
					t.Errorf("%q %s: label %d text %q", format, smp.key, smp.label, smp.text)
				}
				ids := tk.Tokenize(smp.text)
				if slices.Contains(ids, unk) {
					t.Errorf("%q %s: %q tokenizes with [UNK]", format, smp.key, smp.text)
				}
				words += len(strings.Fields(smp.text))
				pieces += len(ids)
			}
		}
		if len(labels) != TextClasses {
			t.Errorf("%q: labels %v, want all %d classes", format, labels, TextClasses)
		}
		if slices.Sort(keys); len(slices.Compact(keys)) != 300 {
			t.Errorf("%q: keys are not unique across shards", format)
		}
		// Whole-word tokens plus punctuation and the odd number split into
		// digits: well under two pieces a word.
		if pieces > 2*words || pieces < words {
			t.Errorf("%q: %d words made %d pieces", format, words, pieces)
		}
	}
}

func TestTextOptionsValidate(t *testing.T) {
	for _, c := range []struct {
		o    TextOptions
		want string
	}{
		{TextOptions{Samples: 0, Shards: 1}, "samples 0"},
		{TextOptions{Samples: 5, Shards: 6}, "shards 6"},
		{TextOptions{Samples: 5, Shards: 1, Format: "csv"}, `text format "csv"`},
	} {
		if _, err := Text(c.o); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Text(%+v): %v, want %q", c.o, err, c.want)
		}
	}
	if err := DefaultTextOptions().Validate(); err != nil {
		t.Error(err)
	}
}
