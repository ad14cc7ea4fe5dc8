package synth

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strconv"
	"strings"

	"github.com/sluice-project/sluice/format/wds"
)

// TextOptions shapes a synthetic text classification dataset: short
// news-like passages, each about one of TextClasses topics (sports,
// weather, food, technology), labelled with the topic's index.
type TextOptions struct {
	Samples int
	Shards  int
	Seed    uint64
	// Format is "tar" (WebDataset: a .txt and a .cls member per sample,
	// shards named *.tar) or "jsonl" (one {"text": ..., "label": n} line
	// per sample, shards named *.jsonl). Empty means "tar".
	Format string
}

// DefaultTextOptions are the demo's.
func DefaultTextOptions() TextOptions {
	return TextOptions{Samples: 20000, Shards: 8, Seed: 1, Format: "jsonl"}
}

// Validate names the first option out of range.
func (o TextOptions) Validate() error {
	switch {
	case o.Samples < 1 || o.Samples > 10_000_000:
		return fmt.Errorf("samples %d: want 1..10000000", o.Samples)
	case o.Shards < 1 || o.Shards > o.Samples:
		return fmt.Errorf("shards %d: want 1..samples (%d)", o.Shards, o.Samples)
	case o.Format != "" && o.Format != "tar" && o.Format != "jsonl":
		return fmt.Errorf("text format %q: want tar or jsonl", o.Format)
	}
	return nil
}

// TextClasses is the number of labels in the text dataset.
const TextClasses = 4

// The words are all in functions/text's builtin vocab as whole tokens
// (synth's tests check), so the demo's tokens are mostly real words.
var (
	topicWords = [TextClasses][]string{
		strings.Fields(`team player players game games match season coach goal goals score scored win won
			lose lost league cup final championship stadium fans ball football soccer tennis basketball
			baseball race runner sport club victory defeat tournament referee injury training`),
		strings.Fields(`weather rain rainy sunny cloudy storm storms wind windy snow cold warm hot temperature
			forecast degrees morning afternoon evening night sky clouds thunder flood heat frost fog`),
		strings.Fields(`food meal dinner lunch breakfast recipe cook cooking kitchen bread cheese soup salad
			chicken rice pasta sauce fruit vegetables coffee tea sugar salt butter cake restaurant chef
			taste delicious fresh eat`),
		strings.Fields(`computer software hardware data network internet phone app device screen chip code
			program user online digital technology system server cloud battery memory model robot`),
	}
	subjects = strings.Fields(`the a this our their every one some many most few the the`)
	verbs    = strings.Fields(`said says reported announced expected planned decided started finished opened
		closed played went came made took gave found saw heard thought knew felt got kept moved paid
		sold bought built grew rose fell ran won lost is was will would could should can may might`)
	fillers = strings.Fields(`and but or with from about after before during under over into through
		because while then again also very just now still never always often more less new old big
		small good bad great best early late young last first next many much same different large
		little important people city country year day week time today tomorrow yesterday public`)
)

// Text generates the shards in memory. Sample i goes to shard i%Shards.
// Tar shards key samples by zero-padded sample number; JSONL shards have no
// keys of their own (readers key lines by shard and line number).
func Text(o TextOptions) ([]Shard, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	format := o.Format
	if format == "" {
		format = "tar"
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0x7e47))
	bufs := make([]bytes.Buffer, o.Shards)
	out := make([]Shard, o.Shards)
	var ws []*wds.Writer
	for s := range out {
		out[s].Name = fmt.Sprintf("shard-%06d.%s", s, format)
		if format == "tar" {
			ws = append(ws, wds.NewWriter(&bufs[s]))
		}
	}
	for i := range o.Samples {
		s := i % o.Shards
		label := rng.IntN(TextClasses)
		txt := passage(rng, label)
		if format == "tar" {
			if err := ws[s].Write(wds.Sample{Key: fmt.Sprintf("%08d", i), Files: map[string][]byte{
				"txt": []byte(txt), "cls": []byte(strconv.Itoa(label)),
			}}); err != nil {
				return nil, err
			}
		} else {
			line, err := json.Marshal(struct {
				Text  string `json:"text"`
				Label int    `json:"label"`
			}{txt, label})
			if err != nil {
				return nil, fmt.Errorf("encoding synthetic text sample: %w", err)
			}
			bufs[s].Write(line)
			bufs[s].WriteByte('\n')
		}
		out[s].Samples++
	}
	for s := range out {
		if format == "tar" {
			if err := ws[s].Close(); err != nil {
				return nil, err
			}
		}
		out[s].Data = bufs[s].Bytes()
	}
	return out, nil
}

// passage is one to four sentences, about half their words from the
// topic, so a classifier has something to learn.
func passage(rng *rand.Rand, topic int) string {
	var b strings.Builder
	for n := range 1 + rng.IntN(4) {
		if n > 0 {
			b.WriteByte(' ')
		}
		words := 6 + rng.IntN(15)
		for w := range words {
			var word string
			switch {
			case w == 0:
				word = subjects[rng.IntN(len(subjects))]
				word = strings.ToUpper(word[:1]) + word[1:]
			case w == 2:
				word = verbs[rng.IntN(len(verbs))]
			case rng.IntN(2) == 0:
				word = topicWords[topic][rng.IntN(len(topicWords[topic]))]
			case rng.IntN(12) == 0:
				word = strconv.Itoa(rng.IntN(1000))
			default:
				word = fillers[rng.IntN(len(fillers))]
			}
			if w > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(word)
			if w > 0 && w < words-1 && rng.IntN(10) == 0 {
				b.WriteByte(',')
			}
		}
		b.WriteByte(".!?."[rng.IntN(4)])
	}
	return b.String()
}
