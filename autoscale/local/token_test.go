package local

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/bearer"
	"github.com/sluice-project/sluice/internal/connect"
)

// TestReplicasGetTheTokenThroughTheEnvironment: a replica started with
// WithToken requires the token (it reads it from its environment), and
// its command line does not hold it.
func TestReplicasGetTheTokenThroughTheEnvironment(t *testing.T) {
	tok, err := bearer.Parse("replica-token-0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	t.Setenv(bearer.Function.FileEnv(), "/nonexistent/token") // this process's: not the replicas'
	a := newTestActuator(t, "token", Options{}.WithToken(tok))
	if err := a.Scale(context.Background(), "j", 1); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for a.Ready("j") < 1 {
		if time.Now().After(deadline) {
			t.Fatal("the replica is not ready 30s on")
		}
		time.Sleep(10 * time.Millisecond)
	}
	url := a.Endpoints("j")[0]
	for _, send := range []bool{false, true} {
		req, _ := http.NewRequest(http.MethodPost, url, nil)
		if send {
			tok.Authorize(req)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if want := map[bool]int{false: 401, true: 200}[send]; resp.StatusCode != want {
			t.Errorf("token sent %v: %d, want %d", send, resp.StatusCode, want)
		}
	}
	for _, pid := range a.pids() {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			t.Skipf("no /proc: %v", err)
		}
		if strings.Contains(string(cmdline), tok.Reveal()) {
			t.Errorf("the replica's command line has the token: %q", cmdline)
		}
	}
}

func TestWithToken(t *testing.T) {
	base := FnServe([]string{"sluice", "fn", "serve"}, 1, 1, connect.Default())
	if got := base.WithToken(bearer.Token{}); len(got.Env) != len(base.Env) {
		t.Errorf("a zero token changed the environment: %q", got.Env)
	}
	tok, _ := bearer.Parse("replica-token-0123456789abcdef")
	o := base.WithToken(tok)
	if !strings.Contains(strings.Join(o.Env, "\n"), "SLUICE_FN_TOKEN="+tok.Reveal()) {
		t.Errorf("environment %q lacks the token", o.Env)
	}
	if strings.Contains(strings.Join(o.Command, " "), tok.Reveal()) {
		t.Errorf("command %q has the token", o.Command)
	}
	if len(base.Env) != len(o.Env)-2 {
		t.Error("WithToken changed its receiver's environment")
	}
}
