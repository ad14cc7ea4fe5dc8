package wire

import (
	"strings"
	"testing"
)

func TestAgentCredentials(t *testing.T) {
	k1, _ := ParseTeamKey(NewTeamKey())
	k2, _ := ParseTeamKey(NewTeamKey())
	p1, p2 := AgentNATSPassword(k1), AgentNATSPassword(k2)
	if p1 == p2 || len(p1) != 64 {
		t.Errorf("passwords %q, %q: want 64 hex digits, one per key", p1, p2)
	}
	h := AgentPasswordHash(p1)
	if strings.Contains(h, p1) || h == AgentPasswordHash(p2) {
		t.Errorf("hash %q", h)
	}
	if !AgentPasswordMatches(p1, h) || AgentPasswordMatches(p2, h) || AgentPasswordMatches(p1, "") || AgentPasswordMatches(p1, h[:10]) {
		t.Error("AgentPasswordMatches: want the key's password only")
	}
	for user, want := range map[string]string{
		AgentNATSUser("job-1"): "job-1",
		"sluice-agent":         "",
		"sluice-job-":          "",
		"sluice-job-a.b":       "",
		"sluice-job-a>":        "",
		"sluice-controller":    "",
	} {
		job, err := AgentJobOfUser(user)
		if job != want || (want == "") != (err != nil) {
			t.Errorf("AgentJobOfUser(%q) = %q, %v; want %q", user, job, err, want)
		}
	}
}
