package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/sluice-project/sluice/broker"
	"github.com/sluice-project/sluice/internal/connect"
	"github.com/sluice-project/sluice/internal/logbuf"
	"github.com/sluice-project/sluice/internal/natsperm"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/wire"
)

// TestCheckAgentLogin: an agent is let in as its job only with the
// password of the job's team key; every refusal says why without the
// password.
func TestCheckAgentLogin(t *testing.T) {
	key, _ := wire.ParseTeamKey(wire.NewTeamKey())
	other, _ := wire.ParseTeamKey(wire.NewTeamKey())
	pw := wire.AgentNATSPassword(key)
	rec := &wire.Job{AgentAuth: wire.AgentPasswordHash(pw)}
	for _, tc := range []struct {
		name     string
		login    agentLogin
		rec      *wire.Job
		job      string // from the user; "" refused before the lookup
		wantFail string
	}{
		{"the job's key", agentLogin{wire.AgentNATSUser("a"), pw}, rec, "a", ""},
		{"another key", agentLogin{wire.AgentNATSUser("a"), wire.AgentNATSPassword(other)}, rec, "a", refusedWrongPassword},
		{"no password", agentLogin{wire.AgentNATSUser("a"), ""}, rec, "a", refusedWrongPassword},
		{"no such job", agentLogin{wire.AgentNATSUser("a"), pw}, nil, "a", refusedNoJob},
		{"a job without a key", agentLogin{wire.AgentNATSUser("a"), pw}, &wire.Job{}, "a", refusedNoCredential},
		{"the shared user of before", agentLogin{"sluice-agent", pw}, rec, "", refusedNotAgent},
		{"not a job's user", agentLogin{"sluice-job-a.>", pw}, rec, "", refusedNotAgent},
	} {
		job, err := jobOfLogin(tc.login)
		if (err != nil) != (tc.job == "") || job != tc.job {
			t.Errorf("%s: job %q, %v; want %q", tc.name, job, err, tc.job)
			continue
		}
		label := refusedNotAgent
		if err == nil {
			label, err = checkAgentLogin(tc.login, job, tc.rec)
		}
		if (err != nil) != (tc.wantFail != "") || (err != nil && label != tc.wantFail) {
			t.Errorf("%s: %q %v, want refusal %q", tc.name, label, err, tc.wantFail)
		}
		if err != nil && tc.login.Password != "" && strings.Contains(err.Error(), tc.login.Password) {
			t.Errorf("%s: the reason quotes the password: %v", tc.name, err)
		}
	}
}

// TestCalloutLetsAgentsInAsTheirJobOnly: on a server with the shipped
// authorization, the controller lets an agent in with its job's team key,
// and refuses one with another job's key or as a job that does not
// exist: each refusal is logged with the job and the reason, never the
// password, and counted.
func TestCalloutLetsAgentsInAsTheirJobOnly(t *testing.T) {
	e := newSecureEnv(t, 2)
	r := e.startController(t, "c1", Options{})
	keyA, _ := wire.ParseTeamKey(wire.NewTeamKey())
	keyB, _ := wire.ParseTeamKey(wire.NewTeamKey())
	for id, key := range map[string][]byte{"a": keyA, "b": keyB} {
		if _, err := e.b.Submit(context.Background(), spec(id, "img", 1), broker.WithTeamKey(key)); err != nil {
			t.Fatal(err)
		}
	}
	if _, _, err := e.secure.ConnectAgent(t, "a", keyA); err != nil {
		t.Errorf("an agent of a with a's key: %v", err)
	}
	for _, tc := range []struct {
		job    string
		key    []byte
		result string
	}{
		{"b", keyA, refusedWrongPassword},
		{"c", keyA, refusedNoJob},
	} {
		if _, _, err := e.secure.ConnectAgent(t, tc.job, tc.key); err == nil {
			t.Errorf("an agent of %s with a's key was let in", tc.job)
		}
		if got := agentLogins(t, e, tc.result); got != 1 {
			t.Errorf("%s refusals counted: %v, want 1", tc.result, got)
		}
		logs := r.logs.String()
		if !strings.Contains(logs, "refused an agent's NATS login") || !strings.Contains(logs, "job="+tc.job) || !strings.Contains(logs, "reason="+tc.result) {
			t.Errorf("no refusal of %s logged with its job and reason:\n%s", tc.job, logs)
		}
		if strings.Contains(logs, wire.AgentNATSPassword(tc.key)) {
			t.Errorf("the log holds the password:\n%s", logs)
		}
	}
	if got := agentLogins(t, e, "accepted"); got != 1 {
		t.Errorf("accepted logins %v, want 1", got)
	}
}

// agentConfig is the connection an agent of job makes with key's
// password, as `sluice agent` makes it (RetryAuth).
func agentConfig(e *env, job string, key []byte) connect.Config {
	c := connect.Default()
	c.NATS = connect.NATS{URLs: []string{e.secure.URL()}, User: wire.AgentNATSUser(job), Password: wire.AgentNATSPassword(key),
		InboxPrefix: natsperm.AgentFor(job).InboxPrefix, RetryAuth: true}
	return c
}

// agentLogins is the controller's count of agents' logins with result.
func agentLogins(t *testing.T, e *env, result string) float64 {
	t.Helper()
	n, err := testenv.Counter(e.reg, "sluice_controller_agent_logins_total", "result", result)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// TestAgentReconnectsOnceAControllerAnswers: an agent's connection (as
// `sluice agent` makes it: connect.NATS with RetryAuth) that must
// reconnect while no controller answers the callout is refused, and keeps
// trying: it is back once a controller runs again, rather than closed
// for good after the second refusal, as nats.go does by default.
func TestAgentReconnectsOnceAControllerAnswers(t *testing.T) {
	e := newSecureEnv(t, 2)
	r := e.startController(t, "c1", Options{})
	key, _ := wire.ParseTeamKey(wire.NewTeamKey())
	if _, err := e.b.Submit(context.Background(), spec("a", "img", 1), broker.WithTeamKey(key)); err != nil {
		t.Fatal(err)
	}
	c := agentConfig(e, "a", key)
	logger, logs := logbuf.Logger(slog.LevelDebug)
	nc, _, err := c.ConnectNATS(context.Background(), "agent-a", logger)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	r.stop(t)
	refused := agentLogins(t, e, "accepted")
	if err := nc.ForceReconnect(); err != nil {
		t.Fatal(err)
	}
	// Refused three times (each after the server's callout timeout):
	// nats.go closes the connection at the second unless told otherwise.
	testenv.CheckFor(t, time.Minute, 50*time.Millisecond, func() error {
		if nc.IsClosed() {
			t.Fatalf("the connection was closed after refused reconnects:\n%s", logs)
		}
		if n := strings.Count(logs.String(), "authorization violation"); n < 3 {
			return fmt.Errorf("refused %d times, want 3 (closed %t):\n%s", n, nc.IsClosed(), logs)
		}
		return nil
	})
	e.startController(t, "c2", Options{})
	testenv.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		if !nc.IsConnected() {
			return fmt.Errorf("agent not connected again (%v, closed %t)", nc.LastError(), nc.IsClosed())
		}
		return nil
	})
	if got := agentLogins(t, e, "accepted"); got != refused+1 {
		t.Errorf("accepted logins %v, want %v: the reconnect went through c2", got, refused+1)
	}
}

// TestAgentFirstConnectWaitsForAController: an agent started while no
// controller answers the callout (one not up yet, failing over, or too
// busy to answer within the server's wait, as `sluice demo` was under
// load) is refused by the server once its wait ends. Its first connect
// retries that, logging each retry, and goes through once a controller
// answers, rather than failing the agent at the first refusal.
func TestAgentFirstConnectWaitsForAController(t *testing.T) {
	e := newSecureEnv(t, 2)
	key, _ := wire.ParseTeamKey(wire.NewTeamKey())
	if _, err := e.b.Submit(context.Background(), spec("a", "img", 1), broker.WithTeamKey(key)); err != nil {
		t.Fatal(err)
	}
	c := agentConfig(e, "a", key)
	logger, logs := logbuf.Logger(slog.LevelDebug)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	type result struct {
		nc  *nats.Conn
		err error
	}
	done := make(chan result, 1)
	go func() {
		nc, _, err := c.ConnectNATS(ctx, "agent-a", logger)
		done <- result{nc, err}
	}()
	testenv.CheckFor(t, 30*time.Second, 50*time.Millisecond, func() error {
		select {
		case r := <-done:
			t.Fatalf("the first connect ended while no controller answered (err %v):\n%s", r.err, logs)
		default:
		}
		if !strings.Contains(logs.String(), "retrying") {
			return fmt.Errorf("no retry logged yet:\n%s", logs)
		}
		return nil
	})
	e.startController(t, "c1", Options{})
	r := <-done
	if r.err != nil {
		t.Fatalf("the agent did not connect once a controller answered: %v\n%s", r.err, logs)
	}
	defer r.nc.Close()
	if got := agentLogins(t, e, "accepted"); got != 1 {
		t.Errorf("accepted logins %v, want 1", got)
	}
}

// TestAgentRefusedFailsWithoutRetrying: a refusal the controller answers
// (a wrong password, a job nobody submitted) is not retried: the first
// connect fails at once with ErrNATSAuthorization, the controller having
// been asked once.
func TestAgentRefusedFailsWithoutRetrying(t *testing.T) {
	e := newSecureEnv(t, 2)
	e.startController(t, "c1", Options{})
	key, _ := wire.ParseTeamKey(wire.NewTeamKey())
	other, _ := wire.ParseTeamKey(wire.NewTeamKey())
	if _, err := e.b.Submit(context.Background(), spec("a", "img", 1), broker.WithTeamKey(key)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, job, label string
		key              []byte
	}{
		{"wrong password", "a", refusedWrongPassword, other},
		{"unknown job", "nobody", refusedNoJob, key},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := agentConfig(e, c.job, c.key)
			logger, logs := logbuf.Logger(slog.LevelDebug)
			before := agentLogins(t, e, c.label)
			nc, _, err := cfg.ConnectNATS(context.Background(), "agent-"+c.job, logger)
			if err == nil {
				nc.Close()
				t.Fatal("connected")
			}
			if !errors.Is(err, connect.ErrNATSAuthorization) {
				t.Fatalf("err %v, want ErrNATSAuthorization", err)
			}
			if got := agentLogins(t, e, c.label) - before; got != 1 {
				t.Errorf("the controller refused %v times, want 1 (no retry of a refusal)", got)
			}
			if strings.Contains(logs.String(), "retrying") {
				t.Errorf("a refusal was retried:\n%s", logs)
			}
		})
	}
}

// BenchmarkAgentLogin is one agent's NATS connect through the auth
// callout (the controller reads the job's record, checks the hash and
// signs the user), against a plain connect as a static user.
func BenchmarkAgentLogin(b *testing.B) {
	secure := testenv.NewSecureNATS(b)
	nc, js := secure.Connect(b, natsperm.Admin())
	e := newEnvOn(b, 2, nc, js)
	e.secure = secure
	e.startControllerB(b, "c1", Options{})
	key, _ := wire.ParseTeamKey(wire.NewTeamKey())
	if _, err := e.b.Submit(context.Background(), spec("a", "img", 1), broker.WithTeamKey(key)); err != nil {
		b.Fatal(err)
	}
	b.Run("as-job", func(b *testing.B) {
		for b.Loop() {
			c, err := nats.Connect(secure.URL(), nats.UserInfo(wire.AgentNATSUser("a"), wire.AgentNATSPassword(key)))
			if err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
	b.Run("static-user", func(b *testing.B) {
		r := natsperm.CLI()
		for b.Loop() {
			c, err := nats.Connect(secure.URL(), nats.UserInfo(r.User(), secure.Auth.Passwords[r.Name]))
			if err != nil {
				b.Fatal(err)
			}
			c.Close()
		}
	})
}

// TestAgentLoginExpiresAndIsCheckedAgain: an agent's login lasts
// AgentLoginTTL. Its connection then closes and reconnects through the
// callout: let in again while its job stands, refused once the job id was
// deleted and submitted again with another team key, so the old agent
// does not keep the new submission's subjects.
func TestAgentLoginExpiresAndIsCheckedAgain(t *testing.T) {
	e := newSecureEnv(t, 2)
	const ttl = 2 * time.Second
	e.startController(t, "c1", Options{AgentLoginTTL: ttl})
	key, _ := wire.ParseTeamKey(wire.NewTeamKey())
	ctx := context.Background()
	if _, err := e.b.Submit(ctx, spec("a", "img", 1), broker.WithTeamKey(key)); err != nil {
		t.Fatal(err)
	}
	c := agentConfig(e, "a", key)
	logger, logs := logbuf.Logger(slog.LevelDebug)
	nc, _, err := c.ConnectNATS(ctx, "agent-a", logger)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	testenv.CheckFor(t, 4*ttl, 50*time.Millisecond, func() error {
		if got := agentLogins(t, e, "accepted"); got < 2 {
			return fmt.Errorf("accepted logins %v, want a second after the first expired", got)
		}
		if !nc.IsConnected() {
			return errors.New("not connected again")
		}
		// nats.go runs its reconnect handler, which logs, after it is
		// connected again.
		if !strings.Contains(logs.String(), "nats reconnected") {
			return fmt.Errorf("no reconnect logged:\n%s", logs)
		}
		return nil
	})

	if err := e.b.Delete(ctx, "a", true); err != nil {
		t.Fatal(err)
	}
	other, _ := wire.ParseTeamKey(wire.NewTeamKey())
	if _, err := e.b.Submit(ctx, spec("a", "img", 1), broker.WithTeamKey(other)); err != nil {
		t.Fatal(err)
	}
	testenv.CheckFor(t, 4*ttl, 50*time.Millisecond, func() error {
		if got := agentLogins(t, e, refusedWrongPassword); got < 1 {
			return fmt.Errorf("the old agent's reconnect was not refused (refusals %v, connected %t)", got, nc.IsConnected())
		}
		return nil
	})
	// Refused at every try from then on: it never holds the new
	// submission's subjects.
	time.Sleep(ttl)
	if nc.IsConnected() {
		t.Error("the old submission's agent is connected to the new one")
	}
}
