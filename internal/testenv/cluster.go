package testenv

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
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
		routePorts[i] = routePort(t)
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
	if !s.ReadyForConnections(30 * time.Second) {
		c.t.Fatalf("nats node %d not ready", i)
	}
	c.servers[i] = s
	return s
}

// routePort is a free loopback port below the kernel's ephemeral range.
// The nodes started first dial the later nodes' route ports over and over
// while those are down; a dial to a port inside the ephemeral range can
// take that very port as its own source (a TCP self-connect), and the node
// then cannot bind it. Ports outside the range are never picked as a
// source, nor handed to another test's ":0" listener.
func routePort(t testing.TB) int {
	t.Helper()
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				low = n
			}
		}
	}
	const from = 10000
	if low <= from+100 {
		t.Fatalf("the ephemeral port range starts at %d: no room below it for route ports", low)
	}
	for range 100 {
		p := from + rand.IntN(low-from)
		ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p))
		if err != nil {
			continue
		}
		ln.Close()
		return p
	}
	t.Fatal("no free route port below the ephemeral range")
	return 0
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

// Server is node i (nil if not started).
func (c *NATSCluster) Server(i int) *server.Server { return c.servers[i] }
