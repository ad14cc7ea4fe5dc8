package slowlink

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

// TestLinkAddsLatencyAndCapsBandwidth: a 256 KiB body over a 1 MiB/s link
// with 50ms latency takes at least 50ms + 250ms, and is counted.
func TestLinkAddsLatencyAndCapsBandwidth(t *testing.T) {
	body := bytes.Repeat([]byte("x"), 256<<10)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(body) }))
	defer up.Close()
	p, err := Start(up.URL, Options{Latency: 50 * time.Millisecond, BytesPerS: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	start := time.Now()
	resp, err := http.Get(p.URL() + "/obj")
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("body: %d bytes, err %v", len(got), err)
	}
	if took := time.Since(start); took < 300*time.Millisecond {
		t.Errorf("took %v, want at least 300ms", took)
	}
	if p.Bytes() != int64(len(body)) {
		t.Errorf("counted %d bytes, want %d", p.Bytes(), len(body))
	}
	if gets, others := p.Requests(); gets != 1 || others != 0 {
		t.Errorf("requests: %d gets, %d others", gets, others)
	}
}
