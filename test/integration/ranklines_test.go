package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseStdoutRanks: a trainer pod's log, ranks.py's lines among a
// runtime's warnings; a rank's error is an error naming it.
func TestParseStdoutRanks(t *testing.T) {
	log := strings.Join([]string{
		"/usr/lib/python3/some.py:1: UserWarning: a warning",
		"0 0 0 -1 a", "1 0 0 -1 b", "0 0 1 -1 c",
		"1 0 1 -1 -",
		"9 0 0 -1 not-a-rank-of-this-world",
		"0 done: bytes=300", "1 done: bytes=12",
	}, "\n")
	s, err := ParseStdoutRanks(log, 2)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Lines[0]) != 2 || s.Lines[0][1] != (KeyLine{Epoch: 0, Step: 1, Source: -1, Key: "c"}) || len(s.Lines[1]) != 2 {
		t.Errorf("lines %v", s.Lines)
	}
	if !s.Done[0] || !s.Done[1] || s.Bytes != 312 {
		t.Errorf("done %v bytes %d, want both, 312", s.Done, s.Bytes)
	}
	for _, bad := range []string{"1 error: AgentError: refused", "0 done: 300", "0 x 0 -1 k"} {
		if _, err := ParseStdoutRanks(bad, 2); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}

	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "r-rank0.done"), []byte("bytes=5"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadRankBytes(dir, "r", 2); err == nil {
		t.Error("rank 1 not done: no error")
	}
	if n, err := ReadRankBytes(dir, "r", 1); err != nil || n != 5 {
		t.Errorf("ReadRankBytes: %d, %v; want 5", n, err)
	}
}
