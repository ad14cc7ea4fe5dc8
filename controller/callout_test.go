package controller

import (
	"strings"
	"testing"

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
