package dispatch

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/bearer"
	"github.com/sluice-project/sluice/wire"
)

// TestSendShard: how sendShard reads each kind of reply.
func TestSendShard(t *testing.T) {
	task := testJob("js", 3, 1).Task(0, 2) // 3 chunks
	frames := func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", wire.ShardStreamMediaType)
	}
	end := func(e wire.ShardEnd) []byte { b, _ := json.Marshal(e); return b }
	tests := []struct {
		name       string
		handler    func(w http.ResponseWriter)
		wantKind   failKind
		wantErr    string // "" wants success
		wantChunks int
	}{
		{name: "a whole shard", handler: func(w http.ResponseWriter) { writeShard(w, task, -1) }, wantChunks: 3},
		{name: "a media type parameter is fine", handler: func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", wire.ShardStreamMediaType+"; charset=binary")
			_ = wire.WriteFrame(w, wire.FrameEnd, 0, end(wire.ShardEnd{Job: task.Job, Epoch: task.Epoch, Shard: task.Shard}))
		}},
		{name: "400", handler: rejected(400, "bad task"), wantKind: failPermanent, wantErr: "400 Bad Request: bad task"},
		{name: "404", handler: rejected(404, "no shard"), wantKind: failPermanent, wantErr: "404"},
		{name: "413", handler: rejected(413, ""), wantKind: failPermanent, wantErr: "413"},
		{name: "415", handler: rejected(415, ""), wantKind: failPermanent, wantErr: "415"},
		{name: "404 without the function's verdict", handler: func(w http.ResponseWriter) { http.Error(w, "no route", 404) },
			wantKind: failTransient, wantErr: "404 Not Found: no route"},
		{name: "429", handler: func(w http.ResponseWriter) { w.WriteHeader(429) }, wantKind: failBusy, wantErr: "429"},
		{name: "503", handler: func(w http.ResponseWriter) { w.WriteHeader(503) }, wantKind: failBusy, wantErr: "503"},
		{name: "401", handler: func(w http.ResponseWriter) { http.Error(w, "no token", 401) }, wantKind: failUnauthorized,
			wantErr: "401 Unauthorized: no token (this agent sent none: it sends the token of --fn-token-file, SLUICE_FN_TOKEN_FILE or SLUICE_FN_TOKEN)"},
		{name: "403", handler: func(w http.ResponseWriter) { w.WriteHeader(403) }, wantKind: failUnauthorized, wantErr: "403"},
		{name: "500", handler: func(w http.ResponseWriter) { w.WriteHeader(500) }, wantKind: failTransient, wantErr: "500"},
		{name: "502", handler: func(w http.ResponseWriter) { w.WriteHeader(502) }, wantKind: failTransient, wantErr: "502"},
		{name: "204", handler: func(w http.ResponseWriter) { w.WriteHeader(204) }, wantKind: failTransient, wantErr: "204"},
		{name: "an error body is bounded", handler: func(w http.ResponseWriter) {
			w.WriteHeader(500)
			_, _ = w.Write([]byte(strings.Repeat("x", 1<<20)))
		}, wantKind: failTransient, wantErr: strings.Repeat("x", maxErrorBody)},
		{name: "200 of another media type", handler: func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/cloudevents+json")
		}, wantKind: failMalformed, wantErr: "Content-Type"},
		{name: "cut mid-chunk", handler: func(w http.ResponseWriter) { writeShard(w, task, 2) }, wantKind: failTransient,
			wantErr: "shard incomplete", wantChunks: 2},
		{name: "ends without a shard end", handler: func(w http.ResponseWriter) {
			frames(w)
			_ = wire.WriteFrame(w, wire.FrameChunk, 0, chunkData(task, 0))
		}, wantKind: failTransient, wantErr: "ended after 1 chunks without a shard end", wantChunks: 1},
		{name: "a cut frame", handler: func(w http.ResponseWriter) {
			frames(w)
			_, _ = w.Write([]byte{'C', 0, 0, 0, 0, 0, 0, 1, 0, 'x'})
		}, wantKind: failTransient, wantErr: "shard incomplete"},
		{name: "an unknown frame kind", handler: func(w http.ResponseWriter) {
			frames(w)
			_ = wire.WriteFrame(w, wire.FrameKind('Q'), 0, nil)
		}, wantKind: failMalformed, wantErr: "malformed frame stream"},
		{name: "a chunk frame over its bound", handler: func(w http.ResponseWriter) {
			frames(w)
			_, _ = w.Write([]byte{'C', 0, 0, 0, 0, 0x7f, 0, 0, 0})
		}, wantKind: failMalformed, wantErr: "over its bound"},
		{name: "chunks out of order", handler: func(w http.ResponseWriter) {
			frames(w)
			_ = wire.WriteFrame(w, wire.FrameChunk, 1, chunkData(task, 1))
		}, wantKind: failMalformed, wantErr: "sent chunk 1, want chunk 0"},
		{name: "the end of another shard", handler: func(w http.ResponseWriter) {
			frames(w)
			_ = wire.WriteFrame(w, wire.FrameEnd, 0, end(wire.ShardEnd{Job: task.Job, Epoch: task.Epoch, Shard: 9}))
		}, wantKind: failMalformed, wantErr: "shard end of job"},
		{name: "an end counting other chunks", handler: func(w http.ResponseWriter) {
			frames(w)
			_ = wire.WriteFrame(w, wire.FrameChunk, 0, chunkData(task, 0))
			_ = wire.WriteFrame(w, wire.FrameEnd, 0, end(wire.ShardEnd{Job: task.Job, Epoch: task.Epoch, Shard: task.Shard, Chunks: 3}))
		}, wantKind: failMalformed, wantErr: "says 3 chunks after 1", wantChunks: 1},
		{name: "an undecodable end", handler: func(w http.ResponseWriter) {
			frames(w)
			_ = wire.WriteFrame(w, wire.FrameEnd, 0, []byte("{"))
		}, wantKind: failMalformed, wantErr: "decoding the shard end"},
		{name: "a permanent error frame", handler: func(w http.ResponseWriter) {
			frames(w)
			_ = wire.WriteFrame(w, wire.FrameError, 0, []byte(`{"permanent":true,"message":"not a tar file"}`))
		}, wantKind: failPermanent, wantErr: "not a tar file"},
		{name: "a transient error frame", handler: func(w http.ResponseWriter) {
			frames(w)
			_ = wire.WriteFrame(w, wire.FrameError, 0, []byte(`{"message":"s3 reset"}`))
		}, wantKind: failTransient, wantErr: "shard failed after 0 chunks: s3 reset"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tt.handler(w) }))
			defer srv.Close()
			chunks := 0
			got, err := sendShard(context.Background(), srv.Client(), bearer.Token{}, srv.URL, task, time.Minute, func(i int, data []byte) error {
				if string(data) != string(chunkData(task, i)) {
					t.Errorf("chunk %d: %q", i, data)
				}
				chunks++
				return nil
			}, nil)
			if chunks != tt.wantChunks {
				t.Errorf("%d chunks handed over, want %d", chunks, tt.wantChunks)
			}
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if got.Job != task.Job || got.Shard != task.Shard {
					t.Errorf("end %+v", got)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || kindOf(err) != tt.wantKind {
				t.Fatalf("err %v (%s), want %s saying %q", err, kindOf(err).outcome(), tt.wantKind.outcome(), truncate(tt.wantErr, 80))
			}
			if len(err.Error()) > maxErrorBody+512 {
				t.Errorf("error of %d bytes", len(err.Error()))
			}
			if tt.wantKind == failMalformed && !errors.Is(err, wire.ErrFrame) {
				t.Errorf("malformed stream error does not wrap wire.ErrFrame: %v", err)
			}
		})
	}
}

func TestSendShardConnectionRefused(t *testing.T) {
	task := testJob("js", 1, 1).Task(0, 0)
	_, err := sendShard(context.Background(), http.DefaultClient, bearer.Token{}, "http://127.0.0.1:1", task, time.Minute, func(int, []byte) error { return nil }, nil)
	if err == nil || kindOf(err) != failTransient || !strings.Contains(err.Error(), "posting to http://127.0.0.1:1") {
		t.Fatalf("err %v, want a transient posting error", err)
	}
}

// TestSendShardStalled: a replica that goes silent mid-shard fails the
// send (transiently) after the stall timeout; ctx's end is returned as is.
func TestSendShardStalled(t *testing.T) {
	task := testJob("js", 3, 1).Task(0, 2)
	hold := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", wire.ShardStreamMediaType)
		_ = wire.WriteFrame(w, wire.FrameChunk, 0, chunkData(task, 0))
		w.(http.Flusher).Flush()
		select {
		case <-hold:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hold)
	_, err := sendShard(context.Background(), srv.Client(), bearer.Token{}, srv.URL, task, 50*time.Millisecond, func(int, []byte) error { return nil }, nil)
	if !errors.Is(err, errStalled) || kindOf(err) != failTransient {
		t.Errorf("stalled: %v, want a transient errStalled", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		<-time.After(20 * time.Millisecond)
		cancel()
	}()
	_, err = sendShard(ctx, srv.Client(), bearer.Token{}, srv.URL, task, time.Minute, func(int, []byte) error { return nil }, nil)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("ctx ended: %v, want context.Canceled", err)
	}
}

// TestSendShardHeartbeatsKeepASlowShard: a replica that sends nothing but
// heartbeats for longer than the stall timeout, then its chunks and end,
// is not taken for stalled.
func TestSendShardHeartbeatsKeepASlowShard(t *testing.T) {
	task := testJob("js", 3, 1).Task(0, 2)
	const stall = 100 * time.Millisecond
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", wire.ShardStreamMediaType)
		for range 8 { // 8 x 25 ms: twice the stall timeout
			_ = wire.WriteFrame(w, wire.FrameHeartbeat, 0, nil)
			w.(http.Flusher).Flush()
			time.Sleep(stall / 4)
		}
		writeShard(w, task, -1)
	}))
	defer srv.Close()
	chunks := 0
	end, err := sendShard(context.Background(), srv.Client(), bearer.Token{}, srv.URL, task, stall,
		func(int, []byte) error { chunks++; return nil }, nil)
	if err != nil || chunks != 3 || end.Chunks != 3 {
		t.Fatalf("end %+v, %d chunks, err %v: want the shard whole", end, chunks, err)
	}
}

// rejected is a function's reply rejecting the task itself.
func rejected(status int, msg string) func(http.ResponseWriter) {
	return func(w http.ResponseWriter) {
		w.Header().Set(wire.HeaderTaskRejected, "true")
		http.Error(w, msg, status)
	}
}
