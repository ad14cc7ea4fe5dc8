package testenv

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStreamOff is a server on loopback whose JetStream is off until
// turnOn, the streams and buckets setup made with it on kept in its store:
// every JetStream request fails as it does while a lost member's leaders
// are elected (no answer, or an error retry.Transient calls transient),
// for exactly as long as the test says. turnOn restarts the server with
// JetStream on; js reconnects to it.
func JetStreamOff(t testing.TB, setup func(jetstream.JetStream)) (js jetstream.JetStream, turnOn func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	dir := t.TempDir()
	start := func(jsOn bool) *server.Server {
		s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: jsOn, StoreDir: dir, NoLog: true, NoSigs: true})
		if err != nil {
			t.Fatal(err)
		}
		go s.Start()
		if !s.ReadyForConnections(30 * time.Second) {
			t.Fatal("nats server not ready")
		}
		t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
		return s
	}
	stop := func(s *server.Server) { s.Shutdown(); s.WaitForShutdown() }
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	connect := func() jetstream.JetStream {
		nc, err := nats.Connect(url, nats.MaxReconnects(-1), nats.ReconnectWait(50*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(time.Second))
		if err != nil {
			t.Fatal(err)
		}
		return js
	}
	on := start(true)
	setup(connect())
	stop(on)
	off := start(false)
	return connect(), func() { stop(off); start(true) }
}
