package natsperm

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
)

// TestRenderIsWhatNATSServerReads parses Render's block with nats-server's
// own configuration parser: every role is a user with its password from
// the environment and exactly its subjects.
func TestRenderIsWhatNATSServerReads(t *testing.T) {
	for _, r := range Roles() {
		t.Setenv(r.PasswordEnv(), "pw-"+r.Name)
	}
	path := filepath.Join(t.TempDir(), "nats.conf")
	if err := os.WriteFile(path, []byte("port: -1\n"+Render()), 0o600); err != nil {
		t.Fatal(err)
	}
	opts, err := server.ProcessConfigFile(path)
	if err != nil {
		t.Fatalf("nats-server refuses the block: %v\n%s", err, Render())
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
