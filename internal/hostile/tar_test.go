package hostile

import (
	"archive/tar"
	"bytes"
	"io"
	"testing"
)

func TestSparseTarReadsAsSparseMembers(t *testing.T) {
	for _, oldGNU := range []bool{false, true} {
		data := SparseTar("s", 3, 60<<20, oldGNU)
		if len(data) > 3*2048+1024 {
			t.Fatalf("oldGNU %v: %d bytes, want a few KB", oldGNU, len(data))
		}
		tr := tar.NewReader(bytes.NewReader(data))
		for i := range 3 {
			h, err := tr.Next()
			if err != nil {
				t.Fatalf("oldGNU %v: member %d: %v", oldGNU, i, err)
			}
			wantType := byte(tar.TypeReg)
			if oldGNU {
				wantType = tar.TypeGNUSparse
			}
			if h.Name != "s.m"+string(rune('0'+i)) || h.Size != 60<<20 || h.Typeflag != wantType {
				t.Fatalf("oldGNU %v: header %d = %q size %d type %q", oldGNU, i, h.Name, h.Size, h.Typeflag)
			}
			n, err := io.Copy(io.Discard, tr)
			if err != nil || n != 60<<20 {
				t.Fatalf("oldGNU %v: member %d reads %d bytes, %v", oldGNU, i, n, err)
			}
		}
		if _, err := tr.Next(); err != io.EOF {
			t.Fatalf("oldGNU %v: after the members: %v", oldGNU, err)
		}
	}
}
