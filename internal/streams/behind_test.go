package streams

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// TestReplicasBehind: which replicas a read waits for, from the leader's
// view of them. A replica the leader has never heard from (active 0 s ago)
// is waited for only while the leader is new: one lost before the
// election stays that way, and would be waited for forever.
func TestReplicasBehind(t *testing.T) {
	now := time.Date(2026, 12, 7, 5, 0, 0, 0, time.UTC)
	since := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	peer := func(name string, current, offline bool, active time.Duration) *jetstream.PeerInfo {
		return &jetstream.PeerInfo{Name: name, Current: current, Offline: offline, Active: active, Lag: 7}
	}
	for _, tc := range []struct {
		name   string
		c      *jetstream.ClusterInfo
		behind string // "" for none
	}{
		{"one server", nil, ""},
		{"no leader", &jetstream.ClusterInfo{}, "no stream leader"},
		{"all current", &jetstream.ClusterInfo{Leader: "a", LeaderSince: since(time.Hour),
			Replicas: []*jetstream.PeerInfo{peer("b", true, false, time.Second), peer("c", true, false, 0)}}, ""},
		{"one behind, heard from", &jetstream.ClusterInfo{Leader: "a", LeaderSince: since(time.Hour),
			Replicas: []*jetstream.PeerInfo{peer("b", false, false, time.Second), peer("c", true, false, time.Second)}}, "b (7 entries behind)"},
		{"behind, silent", &jetstream.ClusterInfo{Leader: "a", LeaderSince: since(time.Hour),
			Replicas: []*jetstream.PeerInfo{peer("b", false, false, 6*time.Second)}}, ""},
		{"behind, offline", &jetstream.ClusterInfo{Leader: "a", LeaderSince: since(time.Hour),
			Replicas: []*jetstream.PeerInfo{peer("b", false, true, time.Second)}}, ""},
		{"never heard from by a leader of 10 s", &jetstream.ClusterInfo{Leader: "a", LeaderSince: since(10 * time.Second),
			Replicas: []*jetstream.PeerInfo{peer("b", false, false, 0)}}, ""},
		{"never heard from by a leader of 1 s", &jetstream.ClusterInfo{Leader: "a", LeaderSince: since(time.Second),
			Replicas: []*jetstream.PeerInfo{peer("b", false, false, 0)}}, "b (7 entries behind)"},
		{"never heard from, no election time", &jetstream.ClusterInfo{Leader: "a",
			Replicas: []*jetstream.PeerInfo{peer("b", false, false, 0)}}, "b (7 entries behind)"},
	} {
		err := replicasBehind("B", tc.c, now)
		switch {
		case tc.behind == "" && err != nil:
			t.Errorf("%s: %v, want none behind", tc.name, err)
		case tc.behind != "" && (err == nil || !strings.Contains(err.Error(), tc.behind)):
			t.Errorf("%s: %v, want %q", tc.name, err, tc.behind)
		}
	}
}
