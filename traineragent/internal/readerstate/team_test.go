package readerstate_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/traineragent/internal/fixture"
	"github.com/sluice-project/sluice/traineragent/internal/readerstate"
)

// TestJoinMember: a member joins with its ranks; another agent claiming
// them is refused while the first is heard from, and takes them over once
// it has gone quiet; a join that does not fit the reader is refused,
// naming what is wrong; a join under a live member's name is refused with
// its own error (reproduction 11: it wedged the team), and one that comes
// again with the member's nonce (its reply lost) gets the same session.
func TestJoinMember(t *testing.T) {
	job := fixture.Job("join", 1, 2, fixture.Layout{{2}})
	now := time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)
	st := readerstate.NewReaderState(job, readerstate.Config{WorldSize: 4}, now)
	team := readerstate.NewTeamState(4, []int{0, 1})
	st.Steps = team
	const na, nb, nc = "nonce-of-a-0000000", "nonce-of-b-0000000", "nonce-of-c-0000000"
	for _, tc := range []struct {
		name, agent string
		ranks       []int
		world       int
		drop        bool
		want        string
	}{
		{"a world of another size", "b", []int{2, 3}, 5, false, "world size 5"},
		{"another drop_last", "b", []int{2, 3}, 4, true, "drop_last"},
		{"the planner's rank", "b", []int{1, 2}, 4, false, "rank 1 is served by the planner"},
		{"a rank beyond the world", "b", []int{4}, 4, false, "rank 4"},
		{"no rank", "b", nil, 4, false, "serves no rank"},
		{"no name", "", []int{2}, 4, false, "needs a name"},
	} {
		if _, err := team.JoinMember(st, tc.agent, nb, tc.ranks, tc.world, tc.drop, now); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, err, tc.want)
		}
	}
	if _, err := team.JoinMember(st, "a", "short", []int{2, 3}, 4, false, now); err == nil || !strings.Contains(err.Error(), "nonce") {
		t.Errorf("a join without a nonce: %v", err)
	}
	sa, err := team.JoinMember(st, "a", na, []int{2, 3}, 4, false, now)
	if err != nil {
		t.Fatal(err)
	}
	if !team.Complete() {
		t.Errorf("holders %q: want every rank served", team.Holders)
	}
	if again, err := team.JoinMember(st, "a", na, []int{2, 3}, 4, false, now.Add(time.Second)); err != nil || again != sa {
		t.Errorf("a's join again with its nonce: session %q, %v; want %q", again, err, sa)
	}
	if _, err := team.JoinMember(st, "a", nc, []int{2}, 4, false, now.Add(time.Second)); !errors.Is(err, readerstate.ErrNameTaken) {
		t.Errorf("a join under a live member's name with fewer ranks: %v, want ErrNameTaken", err)
	}
	if got := team.Holders; got[2] != "a" || got[3] != "a" || team.Members["a"].Session != sa {
		t.Errorf("after a refused join under a's name: holders %q, session changed %t", got, team.Members["a"].Session != sa)
	}
	if _, err := team.JoinMember(st, "b", nb, []int{3}, 4, false, now.Add(time.Second)); err == nil || !strings.Contains(err.Error(), "served by agent a") {
		t.Errorf("another agent claiming a live member's rank: %v", err)
	}
	if _, err := team.JoinMember(st, "b", nb, []int{3}, 4, false, now.Add(readerstate.MemberStale+time.Second)); err != nil {
		t.Fatalf("taking over a quiet member's rank: %v", err)
	}
	if got := team.Holders; got[2] != "a" || got[3] != "b" {
		t.Errorf("holders %q, want rank 2 still a's and rank 3 b's", got)
	}
	sa2, err := team.JoinMember(st, "a", nc, []int{2}, 4, false, now.Add(readerstate.MemberStale+2*time.Second))
	if err != nil {
		t.Errorf("a restarted (another nonce) joining again with fewer ranks once quiet: %v", err)
	}
	if sa2 == sa {
		t.Errorf("a restarted agent got the old session")
	}
}
