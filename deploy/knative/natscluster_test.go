package knative_test

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-project/sluice/internal/natsperm"
	"github.com/sluice-project/sluice/internal/testenv"
)

const clusterConfPath = "components/nats-cluster/cluster.conf"

// logLines is a nats-server logger that keeps what it logs, for a test to
// wait on.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(format string, v ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, v...))
}
func (l *logLines) Noticef(format string, v ...any) { l.add(format, v...) }
func (l *logLines) Warnf(format string, v ...any)   { l.add(format, v...) }
func (l *logLines) Fatalf(format string, v ...any)  { l.add(format, v...) }
func (l *logLines) Errorf(format string, v ...any)  { l.add(format, v...) }
func (l *logLines) Debugf(format string, v ...any)  { l.add(format, v...) }
func (l *logLines) Tracef(format string, v ...any)  { l.add(format, v...) }

func (l *logLines) has(s string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			return true
		}
	}
	return false
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// clusterMember parses the shipped cluster.conf (with nats.conf beside it,
// as the ConfigMap mounts them) in the environment the StatefulSet gives
// member name, its routes being routes, and starts it on loopback with
// its cluster port at port.
func clusterMember(t *testing.T, dir, name string, port int, routes []string, routePassword string) (*server.Server, *logLines) {
	t.Helper()
	t.Setenv("POD_NAME", name)
	t.Setenv("SLUICE_NATS_ROUTE_PASSWORD", routePassword)
	for i, r := range routes {
		t.Setenv(fmt.Sprintf("SLUICE_NATS_ROUTE_%d", i), r)
	}
	o, err := server.ProcessConfigFile(filepath.Join(dir, "cluster.conf"))
	if err != nil {
		t.Fatalf("nats-server refuses %s: %v", clusterConfPath, err)
	}
	// A member on a lost node must be given up in seconds (its routes
	// carry interest, such as the auth callout's).
	if d := o.Cluster.PingInterval * time.Duration(o.Cluster.MaxPingsOut+1); d == 0 || d > 20*time.Second {
		t.Errorf("routes pinged every %v, %d outstanding: a silent member is given up after %v, want at most 20s",
			o.Cluster.PingInterval, o.Cluster.MaxPingsOut, d)
	}
	// The pod's ports and volume, here on loopback and in a temporary directory.
	o.Host, o.Port, o.HTTPPort = "127.0.0.1", -1, 0
	o.Cluster.Host, o.Cluster.Port = "127.0.0.1", port
	o.StoreDir = t.TempDir()
	o.NoSigs = true
	s, err := server.NewServer(o)
	if err != nil {
		t.Fatal(err)
	}
	logs := &logLines{}
	s.SetLoggerV2(logs, true, false, false)
	s.Start()
	t.Cleanup(s.Shutdown)
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatalf("%s not ready", name)
	}
	return s, logs
}

// TestNATSClusterConfigFormsACluster: three members from the shipped
// cluster configuration find each other through the routes the
// StatefulSet's environment gives (each URL carrying the route password),
// hold a JetStream bucket on all three (what SLUICE_STREAM_REPLICAS=3 asks
// for), and refuse a route that does not know the password.
func TestNATSClusterConfigFormsACluster(t *testing.T) {
	dir := t.TempDir()
	for src, dst := range map[string]string{natsConfPath: "nats.conf", clusterConfPath: "cluster.conf"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, dst), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	setNATSEnv(t)

	const pw = "route-secret"
	ports := []int{freePort(t), freePort(t), freePort(t)}
	routes := make([]string, 3)
	for i, p := range ports {
		routes[i] = fmt.Sprintf("nats://sluice-route:%s@127.0.0.1:%d", pw, p)
	}
	var members []*server.Server
	var logs0 *logLines
	for i, p := range ports {
		s, l := clusterMember(t, dir, fmt.Sprintf("sluice-nats-%d", i), p, routes, pw)
		members = append(members, s)
		if i == 0 {
			logs0 = l
		}
	}
	testenv.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		for i, s := range members {
			if n := s.NumRoutes(); n < 2 {
				return fmt.Errorf("member %d has %d routes, want 2", i, n)
			}
		}
		return nil
	})

	nc, err := nats.Connect(members[2].ClientURL(), nats.UserInfo("sluice-admin", "pw-admin"),
		nats.CustomInboxPrefix(natsperm.Admin().InboxPrefix))
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	// The JetStream cluster elects its meta leader a moment after the routes form.
	var kv jetstream.KeyValue
	testenv.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: "sluice_jobs", Replicas: 3})
		return err
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := kv.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	info := st.(*jetstream.KeyValueBucketStatus).StreamInfo()
	if got := 1 + len(info.Cluster.Replicas); info.Config.Replicas != 3 || got != 3 {
		t.Errorf("bucket on %d members (config %d), want 3", got, info.Config.Replicas)
	}

	// A fourth server with the wrong password is refused by the member it dials.
	t.Setenv("POD_NAME", "intruder")
	bad := []string{fmt.Sprintf("nats://sluice-route:wrong@127.0.0.1:%d", ports[0])}
	clusterMember(t, dir, "intruder", freePort(t), bad, "wrong")
	testenv.CheckFor(t, 20*time.Second, 50*time.Millisecond, func() error {
		if !logs0.has("Router connection closed: Authentication Failure") {
			logs0.mu.Lock()
			defer logs0.mu.Unlock()
			return fmt.Errorf("member 0 logged no refusal of the intruder's route:\n%s", strings.Join(logs0.lines, "\n"))
		}
		return nil
	})
	// The JetStream meta group (its leader answers) still has the three.
	var peers []string
	for _, s := range members {
		if p := s.JetStreamClusterPeers(); p != nil {
			peers = p
		}
	}
	if len(peers) != 3 {
		t.Errorf("JetStream peers %v after the intruder dialled, want the 3 members", peers)
	}
}

// TestNATSClusterComponentWiresTheRoutes: the component runs the members
// from cluster.conf, one per node, with the route password from the Secret
// and the route URLs built from it by Kubernetes (never on the command
// line), and asks for streams on three replicas.
func TestNATSClusterComponentWiresTheRoutes(t *testing.T) {
	conf, err := os.ReadFile(clusterConfPath)
	if err != nil {
		t.Fatal(err)
	}
	docs := render(t, "../../test/e2e/cluster/manifests/sluice")
	var sts *appsv1.StatefulSet
	for _, d := range find(docs, "apps/v1", "StatefulSet") {
		sts = decode[appsv1.StatefulSet](t, d)
	}
	if sts == nil {
		t.Fatal("no NATS StatefulSet")
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Errorf("NATS replicas %v, want 3", sts.Spec.Replicas)
	}
	spec := sts.Spec.Template.Spec
	if a := spec.Affinity; a == nil || a.PodAntiAffinity == nil || len(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution) != 1 ||
		a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution[0].TopologyKey != "kubernetes.io/hostname" {
		t.Errorf("NATS affinity %+v, want one member per node, required", spec.Affinity)
	}
	c := spec.Containers[0]
	if strings.Join(c.Args, " ") != "--config /etc/nats/cluster.conf" {
		t.Errorf("NATS args %q, want --config /etc/nats/cluster.conf", c.Args)
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	if src := env["SLUICE_NATS_ROUTE_PASSWORD"].ValueFrom; src == nil || src.SecretKeyRef == nil ||
		src.SecretKeyRef.Name != "sluice-nats-auth" || src.SecretKeyRef.Key != "route" {
		t.Errorf("SLUICE_NATS_ROUTE_PASSWORD from %+v, want key route of the Secret sluice-nats-auth", src)
	}
	for i := range 3 {
		want := fmt.Sprintf("nats://sluice-route:$(SLUICE_NATS_ROUTE_PASSWORD)@sluice-nats-%d.sluice-nats-headless:6222", i)
		if got := env[fmt.Sprintf("SLUICE_NATS_ROUTE_%d", i)].Value; got != want {
			t.Errorf("route %d: %q, want %q", i, got, want)
		}
	}
	cmName := ""
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	var cmConf, replicas string
	for _, d := range find(docs, "v1", "ConfigMap") {
		cm := decode[corev1.ConfigMap](t, d)
		switch cm.Name {
		case cmName:
			cmConf = cm.Data["cluster.conf"]
			if cm.Data["nats.conf"] == "" {
				t.Error("sluice-nats-config lost nats.conf, which cluster.conf includes")
			}
		case "sluice-config":
			replicas = cm.Data["SLUICE_STREAM_REPLICAS"]
		}
	}
	if cmConf != string(conf) {
		t.Errorf("ConfigMap %q's cluster.conf is not %s", cmName, clusterConfPath)
	}
	if replicas != "3" {
		t.Errorf("SLUICE_STREAM_REPLICAS %q, want 3", replicas)
	}
}
