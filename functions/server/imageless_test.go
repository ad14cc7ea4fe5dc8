package server

import (
	"archive/tar"
	"bytes"
	"fmt"
	"testing"

	"github.com/sluice-project/sluice/wire"
)

// TestTarOfImagelessMembersEndsInOneBoundedFrame is issue 16's
// reproduction: a tar of 12,000 members without an image once made a
// shard end listing every failed sample, over the NATS payload limit, so
// the shard failed as transient 20 times and was given up. Its end now
// lists wire.MaxFailedListed of them within one end frame and counts the
// rest.
func TestTarOfImagelessMembersEndsInOneBoundedFrame(t *testing.T) {
	const members = 12000
	e := setup(t, Config{})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i := range members {
		body := []byte("no image here")
		if err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("sample-%05d.txt", i), Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	tk := task(0)
	tk.Key = "train/imageless.tar"
	putObject(t, e, tk.Key, buf.Bytes())
	end := complete(t, post(t, e.url, taskEvent(t, tk))).end
	if end.Samples != 0 || end.FailedCount() != members || len(end.Failed) != wire.MaxFailedListed || end.FailedOmitted != members-wire.MaxFailedListed {
		t.Errorf("shard end: %d samples, %d failed (%d listed, %d omitted); want 0, %d (%d listed, the rest omitted)",
			end.Samples, end.FailedCount(), len(end.Failed), end.FailedOmitted, members, wire.MaxFailedListed)
	}
	payload, err := encodeEnd(end)
	if err != nil {
		t.Fatal(err)
	}
	if len(payload) > wire.MaxEndFrameBytes {
		t.Errorf("the end is %d bytes, over its frame's %d", len(payload), wire.MaxEndFrameBytes)
	}
}
