package integration

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/wire"
)

// Cluster is one scenario's world: a nats-server, versitygw (behind a
// FaultProxy when asked), and the sluice processes started in it. Its
// directory holds every process's log and data; it is kept when the test
// fails (or SLUICE_ITEST_KEEP is set) and its log tails are printed.
type Cluster struct {
	T     testing.TB
	Bins  Binaries
	Dir   string
	NATS  *NATSServer
	S3    *S3Server
	Proxy *FaultProxy // nil without faults
	procs *[]*Process // shared with the copies For makes
}

// For returns the cluster for a subtest: failures and cleanups go to t,
// the processes started stay the cluster's.
func (c *Cluster) For(t testing.TB) *Cluster {
	cc := *c
	cc.T = t
	return &cc
}

// ClusterOptions shape a Cluster.
type ClusterOptions struct {
	// Faults, when set, puts a FaultProxy between the sluice processes and
	// versitygw (the test's own uploads go to versitygw directly).
	Faults *FaultOptions
}

// StartCluster starts nats-server and versitygw for t.
func StartCluster(t testing.TB, bins Binaries, o ClusterOptions) *Cluster {
	t.Helper()
	name := strings.NewReplacer("/", "_", " ", "_").Replace(t.Name())
	dir, err := os.MkdirTemp("", "sluice-itest-"+name+"-")
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{T: t, Bins: bins, Dir: dir, procs: new([]*Process)}
	// Registered first, so it runs last: after every process stopped.
	t.Cleanup(func() {
		c.killStrays()
		if t.Failed() || os.Getenv("SLUICE_ITEST_KEEP") != "" {
			for _, p := range *c.procs {
				t.Logf("--- %s log (last 40 lines of %s):\n%s", p.Name, p.LogPath, p.Tail(40))
			}
			t.Logf("logs and data kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	certs, err := NewCerts(dir)
	if err != nil {
		t.Fatal(err)
	}
	c.NATS = StartNATSServer(t, bins.NATSServer, dir, certs)
	*c.procs = append(*c.procs, c.NATS.Process)
	c.S3 = StartS3Server(t, bins.VersityGW, dir)
	*c.procs = append(*c.procs, c.S3.Process)
	if o.Faults != nil {
		p, err := StartFaultProxy(c.S3.Endpoint(), *o.Faults)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		c.Proxy = p
	}
	return c
}

// S3Endpoint is the endpoint the sluice processes use: the fault proxy's
// when there is one.
func (c *Cluster) S3Endpoint() string {
	if c.Proxy != nil {
		return c.Proxy.Endpoint()
	}
	return c.S3.Endpoint()
}

// ConnArgs are the NATS connection flags every sluice command gets.
func (c *Cluster) ConnArgs() []string { return c.NATS.ClientArgs() }

// Env is the environment every sluice process gets: the S3 endpoint and
// credentials (SLUICE_S3_ENDPOINT, since only the commands that read S3
// take --s3-endpoint), and the cluster's mark (clusterEnv), which the
// replicas a controller starts inherit.
func (c *Cluster) Env() []string {
	// `sluice job submit` writes each job's team key in the cluster's
	// directory, where the job's agents (one machine) find it.
	return append(c.S3.Env(), "SLUICE_S3_ENDPOINT="+c.S3Endpoint(), clusterEnv+"="+c.Dir,
		wire.TeamKeyDirEnv+"="+filepath.Join(c.Dir, "teamkeys"))
}

// clusterEnv marks the processes of one cluster: replicas take no NATS
// settings, so the NATS URL no longer tells a cluster's replicas apart.
const clusterEnv = "SLUICE_ITEST_CLUSTER"
