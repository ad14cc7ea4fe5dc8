package fdhttp

import (
	"strings"
	"testing"
)

func TestPoolLendsTheSmallestFreeBufferThatFits(t *testing.T) {
	p := newPool(3, 1000)
	if b := p.free(100); b != nil {
		t.Fatalf("an empty pool lent %d", b.id)
	}
	a, b := p.add(300, nil), p.add(200, nil)
	a.passed, b.passed = true, true
	if p.free(100) != nil {
		t.Fatal("a lent buffer was lent again")
	}
	if err := p.release([]uint32{1, 2}); err != nil {
		t.Fatal(err)
	}
	if got := p.free(150); got != b {
		t.Fatalf("lent %v, want the 200-byte buffer", got)
	}
	if got := p.free(250); got != a {
		t.Fatalf("lent %v, want the 300-byte buffer", got)
	}
	if p.free(50) != nil {
		t.Fatal("lent a buffer while every one was lent")
	}
	if !p.room(500) || p.room(501) {
		t.Fatal("room: 500 bytes are left of 1000")
	}
	p.add(10, nil)
	if p.room(1) {
		t.Fatal("room for a fourth buffer of at most 3")
	}
}

func TestPoolReleaseNamesWhatIsWrongAndTakesNothingBack(t *testing.T) {
	p := newPool(4, 1<<20)
	a, b := p.add(100, nil), p.add(100, nil)
	a.passed = true // b's answer was never sent
	for _, tc := range []struct {
		ids  []uint32
		says string
	}{
		{[]uint32{1, 9}, "buffer 9: this connection has no such buffer"},
		{[]uint32{1, 2}, "buffer 2: not lent to the client"},
		{[]uint32{1, 1}, "buffer 1: released twice"},
	} {
		if err := p.release(tc.ids); err == nil || err.Error() != tc.says {
			t.Errorf("release %v: %v, want %q", tc.ids, err, tc.says)
		}
		if !a.lent || !b.lent {
			t.Fatalf("release %v took a buffer back though it failed", tc.ids)
		}
	}
	if err := p.release([]uint32{1}); err != nil || a.lent {
		t.Fatalf("release 1: %v, lent %v", err, a.lent)
	}
	if err := p.release([]uint32{1}); err == nil {
		t.Fatal("released a buffer not lent")
	}
}

func TestParseRelease(t *testing.T) {
	if ids, err := parseRelease("3, 1,20", 8); err != nil || len(ids) != 3 || ids[0] != 3 || ids[2] != 20 {
		t.Fatalf("%v %v", ids, err)
	}
	if ids, err := parseRelease("", 8); err != nil || ids != nil {
		t.Fatalf("%v %v", ids, err)
	}
	for v, says := range map[string]string{
		"1,x":         `buffer "x": want a buffer number`,
		"0":           `buffer "0": want a buffer number`,
		"1,2,3":       "3 buffers released: a connection has at most 2",
		"99999999999": `buffer "99999999999": want a buffer number`,
	} {
		if _, err := parseRelease(v, 2); err == nil || !strings.Contains(err.Error(), says) {
			t.Errorf("%q: %v, want %q", v, err, says)
		}
	}
}
