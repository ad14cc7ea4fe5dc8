package ready

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestWaitReadsWhatAnnounceWrote(t *testing.T) {
	var b bytes.Buffer
	if err := Announce(&b, "http://127.0.0.1:8080"); err != nil {
		t.Fatal(err)
	}
	b.WriteString("more output, discarded\n")
	url, err := Wait(context.Background(), &b)
	if err != nil || url != "http://127.0.0.1:8080" {
		t.Fatalf("Wait = %q, %v; want the announced URL", url, err)
	}
}

func TestWaitRefusesAnotherFirstLine(t *testing.T) {
	for name, tc := range map[string]struct{ out, wantErr string }{
		"other line":    {"starting\n" + Prefix + "http://x\n", `first line "starting\n", want "SLUICE_READY URL"`},
		"no output":     {"", `first line "" (EOF)`},
		"no newline":    {Prefix + "http://x", `(EOF)`},
		"line too long": {strings.Repeat("x", maxLine+1), "first line over 65536 bytes"},
	} {
		t.Run(name, func(t *testing.T) {
			url, err := Wait(context.Background(), strings.NewReader(tc.out))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Wait = %q, %v; want an error containing %q", url, err, tc.wantErr)
			}
		})
	}
}

func TestWaitEndsWithItsContext(t *testing.T) {
	r, w := io.Pipe()
	defer w.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Wait(ctx, r); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait on a silent pipe with an ended context: %v, want context.Canceled", err)
	}
}

func TestParse(t *testing.T) {
	for line, want := range map[string]string{
		Prefix + "http://a:1\n":    "http://a:1",
		Prefix + "http://a:1 \r\n": "http://a:1",
	} {
		if url, ok := Parse(line); !ok || url != want {
			t.Errorf("Parse(%q) = %q, %v; want %q", line, url, ok, want)
		}
	}
	for _, line := range []string{"starting", " " + Prefix + "http://a:1", "SLUICE_READYhttp://a:1"} {
		if url, ok := Parse(line); ok {
			t.Errorf("Parse(%q) = %q, true; want not a ready line", line, url)
		}
	}
}
