package ratelog

import (
	"testing"
	"time"
)

// TestLimiter: one line a second per reason, the next one counting those
// left out; reasons apart.
func TestLimiter(t *testing.T) {
	var l Limiter
	t0 := time.Unix(100, 0)
	if ok, n := l.Allow("a", t0); !ok || n != 0 {
		t.Fatalf("first: %t %d", ok, n)
	}
	for i := range 5 {
		if ok, _ := l.Allow("a", t0.Add(time.Duration(i)*100*time.Millisecond)); ok {
			t.Fatalf("a within the second logged")
		}
	}
	if ok, _ := l.Allow("b", t0); !ok {
		t.Error("another reason held back by a")
	}
	if ok, n := l.Allow("a", t0.Add(time.Second)); !ok || n != 5 {
		t.Errorf("a second on: %t, %d left out; want logged, 5", ok, n)
	}
}
