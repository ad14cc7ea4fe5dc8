package controller

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sluice-project/sluice/wire"
)

var t0 = time.Date(2026, 11, 23, 6, 0, 0, 0, time.UTC)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

func TestDecideLease(t *testing.T) {
	const ttl = 15 * time.Second
	lease := func(owner string, acquired, expires float64) *wire.Lease {
		return &wire.Lease{Owner: owner, Acquired: at(acquired), Expires: at(expires)}
	}
	for _, tc := range []struct {
		name    string
		cur     *wire.Lease
		want    bool
		now     float64
		action  LeaseAction
		written wire.Lease
	}{
		{"no lease: create", nil, true, 10, LeaseCreate, wire.Lease{Owner: "me", Acquired: at(10), Expires: at(25)}},
		{"mine and live: renew, keeping acquired", lease("me", 0, 15), true, 5, LeaseRenew, wire.Lease{Owner: "me", Acquired: at(0), Expires: at(20)}},
		{"mine, renewed just before expiry", lease("me", 0, 15), true, 14.999, LeaseRenew, wire.Lease{Owner: "me", Acquired: at(0), Expires: at(29.999)}},
		{"mine but expired: take over afresh", lease("me", 0, 15), true, 15, LeaseTakeOver, wire.Lease{Owner: "me", Acquired: at(15), Expires: at(30)}},
		{"another's and live: wait", lease("other", 0, 15), true, 14, LeaseWait, wire.Lease{}},
		{"another's, expired at now: take over", lease("other", 0, 15), true, 15, LeaseTakeOver, wire.Lease{Owner: "me", Acquired: at(15), Expires: at(30)}},
		{"another's, long expired: take over", lease("other", 0, 15), true, 100, LeaseTakeOver, wire.Lease{Owner: "me", Acquired: at(100), Expires: at(115)}},
		{"not wanted, mine: release", lease("me", 0, 15), false, 5, LeaseRelease, wire.Lease{}},
		{"not wanted, mine and expired: release", lease("me", 0, 15), false, 50, LeaseRelease, wire.Lease{}},
		{"not wanted, another's: leave it", lease("other", 0, 15), false, 5, LeaseNone, wire.Lease{}},
		{"not wanted, none: nothing", nil, false, 5, LeaseNone, wire.Lease{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			action, written := DecideLease(tc.cur, tc.want, "me", at(tc.now), ttl)
			if action != tc.action {
				t.Errorf("action %v, want %v", action, tc.action)
			}
			if diff := cmp.Diff(tc.written, written); diff != "" {
				t.Errorf("lease written (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLeaseTimeline scripts two controllers against one lease: the owner
// renews every ttl/3, the standby waits; the owner stops renewing (killed)
// and stops dispatching at expiry - margin; the standby takes over only at
// expiry, so their dispatching never overlaps.
func TestLeaseTimeline(t *testing.T) {
	const ttl = 15 * time.Second
	var cur *wire.Lease
	apply := func(who string, now time.Time) LeaseAction {
		a, l := DecideLease(cur, true, who, now, ttl)
		if a == LeaseCreate || a == LeaseTakeOver || a == LeaseRenew {
			cur = &l
		}
		return a
	}
	if a := apply("a", at(0)); a != LeaseCreate {
		t.Fatalf("a at 0: %v, want create", a)
	}
	if a := apply("b", at(0.1)); a != LeaseWait {
		t.Fatalf("b at 0.1: %v, want wait", a)
	}
	for s := 5.0; s <= 30; s += 5 {
		if a := apply("a", at(s)); a != LeaseRenew {
			t.Fatalf("a at %v: %v, want renew", s, a)
		}
		if a := apply("b", at(s+0.1)); a != LeaseWait {
			t.Fatalf("b at %v: %v, want wait", s+0.1, a)
		}
	}
	// a dies after renewing at 30: its lease runs to 45.
	aStops := cur.Expires.Add(-stopMargin(ttl))
	for s := 30.1; s < 45; s += 1 {
		if a := apply("b", at(s)); a != LeaseWait {
			t.Fatalf("b at %v: %v, want wait while a's lease lives", s, a)
		}
	}
	if a := apply("b", at(45)); a != LeaseTakeOver {
		t.Fatalf("b at 45: %v, want takeover", a)
	}
	if !aStops.Before(cur.Acquired) {
		t.Errorf("a would stop at %v, not before b acquires at %v", aStops, cur.Acquired)
	}
	if cur.Owner != "b" {
		t.Errorf("owner %q, want b", cur.Owner)
	}
}
