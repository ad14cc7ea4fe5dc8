package testenv

import (
	"fmt"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATSCluster is a JetStream cluster of in-process nats-servers on
// loopback whose nodes start only when asked: with fewer than a quorum
// up, the cluster has no meta leader and JetStream cannot answer yet, as
// a cluster just being formed.
type NATSCluster struct {
	t       testing.TB
	opts    []*server.Options
	servers []*server.Server
}

// NewNATSCluster configures n nodes (routes to each other, stores in
// t.TempDir) and starts none.
func NewNATSCluster(t testing.TB, n int) *NATSCluster {
	t.Helper()
	routePorts := make([]int, n)
	for i := range routePorts {
		routePorts[i] = freePort(t)
	}
	c := &NATSCluster{t: t, servers: make([]*server.Server, n)}
	for i := range n {
		var routes []*url.URL
		for j, p := range routePorts {
			if j != i {
				routes = append(routes, &url.URL{Scheme: "nats-route", Host: fmt.Sprintf("127.0.0.1:%d", p)})
			}
		}
		c.opts = append(c.opts, &server.Options{
			ServerName: fmt.Sprintf("n%d", i), Host: "127.0.0.1", Port: -1,
			JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true,
			Cluster: server.ClusterOpts{Name: "sluice-test", Host: "127.0.0.1", Port: routePorts[i]},
			Routes:  routes,
		})
	}
	t.Cleanup(func() {
		for _, s := range c.servers {
			if s != nil {
				s.Shutdown()
				s.WaitForShutdown()
			}
		}
	})
	return c
}

// Start starts node i and returns it once it takes client connections.
func (c *NATSCluster) Start(i int) *server.Server {
	c.t.Helper()
	s, err := server.NewServer(c.opts[i])
	if err != nil {
		c.t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		c.t.Fatalf("nats node %d not ready", i)
	}
	c.servers[i] = s
	return s
}

func freePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// JetStream connects to node i (started) with a one-second request
// timeout: a forming cluster fails requests by its state, not by the
// wait; the connection closes with the test.
func (c *NATSCluster) JetStream(i int) jetstream.JetStream {
	c.t.Helper()
	nc, err := nats.Connect(c.servers[i].ClientURL())
	if err != nil {
		c.t.Fatal(err)
	}
	c.t.Cleanup(nc.Close)
	js, err := jetstream.New(nc, jetstream.WithDefaultTimeout(time.Second))
	if err != nil {
		c.t.Fatal(err)
	}
	return js
}
