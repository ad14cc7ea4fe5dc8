package natsperm

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"

	"github.com/sluice-project/sluice/internal/streams"
)

// TestRenderIsWhatNATSServerReads parses Render's block with nats-server's
// own configuration parser: every role is a user with its password from
// the environment and exactly its subjects.
func TestRenderIsWhatNATSServerReads(t *testing.T) {
	for _, r := range Roles() {
		t.Setenv(r.PasswordEnv(), "pw-"+r.Name)
	}
	issuer, err := nkeys.CreateAccount()
	if err != nil {
		t.Fatal(err)
	}
	pub, _ := issuer.PublicKey()
	t.Setenv(CalloutIssuerEnv, pub)
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, []byte("port: -1\n"+Render()), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server refuses the block: %v\n%s", err, Render())
	}
	if ac := opts.AuthCallout; ac == nil || ac.Issuer != pub || len(ac.AuthUsers) != len(Roles()) {
		t.Errorf("auth callout %+v, want issuer %s and the %d static users", ac, pub, len(Roles()))
	} else {
		for i, r := range Roles() {
			if ac.AuthUsers[i] != r.User() {
				t.Errorf("auth_users[%d] = %s, want %s", i, ac.AuthUsers[i], r.User())
			}
		}
	}
	if want := CalloutWait.Seconds(); opts.AuthTimeout != want {
		t.Errorf("auth timeout %vs, want CalloutWait %vs", opts.AuthTimeout, want)
	}
	users := map[string]*server.User{}
	for _, u := range opts.Users {
		users[u.Username] = u
	}
	if len(users) != len(Roles()) {
		t.Errorf("%d users, want %d", len(users), len(Roles()))
	}
	for _, r := range Roles() {
		u := users[r.User()]
		if u == nil {
			t.Errorf("no user %s", r.User())
			continue
		}
		if u.Password != "pw-"+r.Name {
			t.Errorf("%s: password %q, want the one in %s", r.User(), u.Password, r.PasswordEnv())
		}
		if !slices.Equal(u.Permissions.Publish.Allow, r.Publish) || !slices.Equal(u.Permissions.Subscribe.Allow, r.Subscribe) {
			t.Errorf("%s: permissions %+v %+v, want %q %q", r.User(), u.Permissions.Publish, u.Permissions.Subscribe, r.Publish, r.Subscribe)
		}
	}
}

// TestEachRoleSubscribesToItsOwnInboxOnly: replies to one component's
// requests (key-value entries, stream and consumer info) are not readable
// by another, except the cli's by the admin, which share the commands.
func TestEachRoleSubscribesToItsOwnInboxOnly(t *testing.T) {
	for _, r := range Roles() {
		for _, s := range r.Subscribe {
			if s == ">" || s == "_INBOX.>" {
				t.Errorf("%s subscribes to %s", r.Name, s)
			}
		}
		if !slices.Contains(r.Subscribe, r.InboxPrefix+".>") {
			t.Errorf("%s cannot subscribe to its inbox %s", r.Name, r.InboxPrefix)
		}
		for _, o := range Roles() {
			if o.InboxPrefix != r.InboxPrefix && slices.Contains(r.Subscribe, o.InboxPrefix+".>") {
				t.Errorf("%s subscribes to %s's inbox", r.Name, o.Name)
			}
		}
	}
}

// TestAgentForNamesItsJobOnly: every subject an agent of one job may use
// names that job, but for the account-wide ones (the JetStream account
// info, a bucket's stream info), none names another job, and it creates
// no consumer.
func TestAgentForNamesItsJobOnly(t *testing.T) {
	accountWide := map[string]bool{"$JS.API.INFO": true}
	for _, b := range []string{"sluice_jobs", "sluice_dispatch", "sluice_readers"} {
		accountWide["$JS.API.STREAM.INFO.KV_"+b] = true
	}
	a, b := AgentFor("job-a"), AgentFor("job-b")
	for _, s := range append(slices.Clone(a.Publish), a.Subscribe...) {
		if accountWide[s] {
			continue
		}
		if !strings.Contains(s, "job-a") {
			t.Errorf("agent of job-a may use %q, which names no job", s)
		}
		if strings.Contains(s, ">") && !strings.HasSuffix(s, "job-a.>") && !strings.HasPrefix(s, "$JS.ACK.") {
			t.Errorf("agent of job-a: %q has a > wildcard past its job", s)
		}
	}
	for _, s := range append(slices.Clone(b.Publish), b.Subscribe...) {
		if slices.Contains(a.Publish, s) && !accountWide[s] {
			t.Errorf("agents of job-a and job-b share %q", s)
		}
	}
	for _, s := range a.Publish {
		if strings.Contains(s, "CONSUMER.CREATE") || strings.Contains(s, "CONSUMER.DELETE") {
			t.Errorf("agent of job-a may create or delete a consumer (%q): a push consumer delivers to any subject", s)
		}
	}
	if !slices.Contains(a.Subscribe, a.InboxPrefix+".>") || a.InboxPrefix == b.InboxPrefix {
		t.Errorf("inbox prefixes %q and %q: want one per job, subscribed", a.InboxPrefix, b.InboxPrefix)
	}
}

// TestManagedBucketsAreTheStreams: the buckets whose streams the
// controller and the admin may create are the ones streams.Ensure makes.
func TestManagedBucketsAreTheStreams(t *testing.T) {
	var want []string
	for _, b := range streams.Buckets(streams.Options{}) {
		want = append(want, b.Bucket)
	}
	got := slices.Clone(allBuckets)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("natsperm's buckets %v, streams.Buckets %v", got, want)
	}
}
