package knative_test

import (
	"flag"
	"os"
	"path"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/sluice-project/sluice/internal/natsperm"
)

var update = flag.Bool("update", false, "rewrite nats/nats.conf's authorization block from internal/natsperm")

// natsConfPath is the shipped nats-server configuration.
const natsConfPath = "nats/nats.conf"

const (
	authBegin = "# BEGIN authorization"
	authEnd   = "# END authorization\n"
)

// authBlock splits conf around its generated authorization block: what
// comes before it (through the BEGIN comment), the block, and the rest.
func authBlock(t *testing.T, conf string) (before, block, after string) {
	t.Helper()
	i := strings.Index(conf, authBegin)
	j := strings.Index(conf, authEnd)
	if i < 0 || j < i {
		t.Fatalf("%s: no %q ... %q markers", natsConfPath, authBegin, authEnd)
	}
	// The BEGIN comment runs over two lines.
	k := i
	for range 2 {
		k += strings.IndexByte(conf[k:], '\n') + 1
	}
	return conf[:k], conf[k:j], conf[j:]
}

// TestShippedNATSConfigHasThePermissions: the permissions shipped are the
// ones defined in Go (natsperm), which the integration test runs with.
func TestShippedNATSConfigHasThePermissions(t *testing.T) {
	b, err := os.ReadFile(natsConfPath)
	if err != nil {
		t.Fatal(err)
	}
	before, block, after := authBlock(t, string(b))
	if *update {
		if err := os.WriteFile(natsConfPath, []byte(before+natsperm.Render()+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if block != natsperm.Render() {
		t.Errorf("%s's authorization block differs from natsperm.Render(); run with -update to rewrite it", natsConfPath)
	}
}

// TestShippedNATSConfigParses: nats-server reads the whole shipped file,
// with the variables the StatefulSet sets, and waits CalloutWait for the
// controllers' answer to an auth callout, not its default 2 s.
func TestShippedNATSConfigParses(t *testing.T) {
	_, pub := setNATSEnv(t)
	t.Setenv("POD_NAME", "sluice-nats-0")
	o, err := server.ProcessConfigFile(natsConfPath)
	if err != nil {
		t.Fatalf("nats-server refuses %s: %v", natsConfPath, err)
	}
	if o.AuthCallout == nil || o.AuthCallout.Issuer != pub {
		t.Errorf("auth callout %+v, want issuer %s", o.AuthCallout, pub)
	}
	if want := natsperm.CalloutWait.Seconds(); o.AuthTimeout != want {
		t.Errorf("auth timeout %vs, want natsperm.CalloutWait %vs", o.AuthTimeout, want)
	}
}

// TestManifestsGiveEachComponentItsNATSUser: the NATS server gets every
// role's password and the auth callout's issuer from the Secret, its
// configuration is the shipped file, and the controller connects as its
// role's user with its password alone and answers the callout with the
// seed alone.
func TestManifestsGiveEachComponentItsNATSUser(t *testing.T) {
	conf, err := os.ReadFile(natsConfPath)
	if err != nil {
		t.Fatal(err)
	}
	docs := render(t, "overlays/example")
	var sts *appsv1.StatefulSet
	for _, d := range find(docs, "apps/v1", "StatefulSet") {
		sts = decode[appsv1.StatefulSet](t, d)
	}
	if sts == nil {
		t.Fatal("no NATS StatefulSet")
	}
	env := map[string]*corev1.EnvVarSource{}
	for _, e := range sts.Spec.Template.Spec.Containers[0].Env {
		env[e.Name] = e.ValueFrom
	}
	for _, r := range natsperm.Roles() {
		src := env[r.PasswordEnv()]
		if src == nil || src.SecretKeyRef == nil || src.SecretKeyRef.Name != "sluice-nats-auth" || src.SecretKeyRef.Key != r.Name ||
			(src.SecretKeyRef.Optional != nil && *src.SecretKeyRef.Optional) {
			t.Errorf("NATS server's %s: %+v, want key %q of the Secret sluice-nats-auth, required", r.PasswordEnv(), src, r.Name)
		}
	}
	if src := env[natsperm.CalloutIssuerEnv]; src == nil || src.SecretKeyRef == nil || src.SecretKeyRef.Name != "sluice-nats-auth" ||
		src.SecretKeyRef.Key != "callout-issuer" || (src.SecretKeyRef.Optional != nil && *src.SecretKeyRef.Optional) {
		t.Errorf("NATS server's %s: %+v, want key callout-issuer of the Secret sluice-nats-auth, required", natsperm.CalloutIssuerEnv, src)
	}
	if _, ok := env["SLUICE_NATS_AGENT_PASSWORD"]; ok {
		t.Error("NATS server still reads SLUICE_NATS_AGENT_PASSWORD: agents have no shared user")
	}
	cmName := ""
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	seen := false
	for _, d := range find(docs, "v1", "ConfigMap") {
		cm := decode[corev1.ConfigMap](t, d)
		if cm.Name == cmName {
			seen = true
			if cm.Data["nats.conf"] != string(conf) {
				t.Errorf("ConfigMap %s's nats.conf is not %s", cm.Name, natsConfPath)
			}
		}
	}
	if !seen {
		t.Errorf("the StatefulSet's ConfigMap %q is not rendered", cmName)
	}

	dep := decode[appsv1.Deployment](t, find(docs, "apps/v1", "Deployment")[0])
	pod := dep.Spec.Template.Spec
	vals := map[string]string{}
	for _, e := range pod.Containers[0].Env {
		vals[e.Name] = e.Value
		if strings.HasPrefix(e.Name, "SLUICE_NATS_") && e.ValueFrom != nil {
			t.Errorf("controller env %s from %+v: secrets reach it as a file", e.Name, e.ValueFrom)
		}
	}
	if vals["SLUICE_NATS_USER"] != natsperm.Controller().User() {
		t.Errorf("controller's NATS user %q, want %q", vals["SLUICE_NATS_USER"], natsperm.Controller().User())
	}
	// Each secret file is its Secret key alone, mounted.
	for env, key := range map[string]string{"SLUICE_NATS_PASSWORD_FILE": "controller", "SLUICE_NATS_CALLOUT_SEED_FILE": "callout-seed"} {
		file := vals[env]
		ok := false
		for _, m := range pod.Containers[0].VolumeMounts {
			if path.Dir(file) != m.MountPath {
				continue
			}
			for _, v := range pod.Volumes {
				if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == "sluice-nats-auth" &&
					len(v.Secret.Items) == 1 && v.Secret.Items[0].Key == key && v.Secret.Items[0].Path == path.Base(file) {
					ok = true
				}
			}
		}
		if !ok {
			t.Errorf("controller's %s %q is not the Secret's %s key alone, mounted", env, file, key)
		}
	}
}

// setNATSEnv sets the variables the StatefulSet gives the NATS server:
// each role's password ("pw-" and its name) and a new auth callout
// issuer, which it returns with its public key.
func setNATSEnv(t *testing.T) (nkeys.KeyPair, string) {
	t.Helper()
	for _, r := range natsperm.Roles() {
		t.Setenv(r.PasswordEnv(), "pw-"+r.Name)
	}
	issuer, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := issuer.PublicKey()
	t.Setenv(natsperm.CalloutIssuerEnv, pub)
	return issuer, pub
}
