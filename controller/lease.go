package controller

import (
	"time"

	"github.com/sluice-project/sluice/wire"
)

// LeaseAction is what a controller does about one job's lease.
type LeaseAction int

const (
	// LeaseNone: nothing to do (the job is not wanted and the lease is not mine).
	LeaseNone LeaseAction = iota
	// LeaseWait: another controller holds a live lease.
	LeaseWait
	// LeaseCreate: there is no lease; create one (kv.Create).
	LeaseCreate
	// LeaseTakeOver: the lease expired; replace it (kv.Update on its revision).
	LeaseTakeOver
	// LeaseRenew: the lease is mine and live; extend it (kv.Update on its revision).
	LeaseRenew
	// LeaseRelease: the lease is mine and the job needs no owner here any
	// more; delete it (on its revision).
	LeaseRelease
)

var leaseActionNames = [...]string{"none", "wait", "create", "takeover", "renew", "release"}

func (a LeaseAction) String() string {
	if int(a) < len(leaseActionNames) {
		return leaseActionNames[a]
	}
	return "unknown"
}

// DecideLease is the lease policy. cur is the job's lease (nil when there
// is none), want whether this controller wants the job (it exists, is not
// terminal, and this controller is not stopping). It returns the action
// and, for Create, TakeOver and Renew, the lease to write: owned by me
// until now+ttl, acquired now unless it renews a live lease of mine.
//
// A lease of mine that expired is taken over, not renewed: the job was
// stopped when it lapsed, and taking it again starts it afresh.
func DecideLease(cur *wire.Lease, want bool, me string, now time.Time, ttl time.Duration) (LeaseAction, wire.Lease) {
	mine := cur != nil && cur.Owner == me
	if !want {
		if mine {
			return LeaseRelease, wire.Lease{}
		}
		return LeaseNone, wire.Lease{}
	}
	fresh := wire.Lease{Owner: me, Expires: now.Add(ttl), Acquired: now}
	switch {
	case cur == nil:
		return LeaseCreate, fresh
	case cur.Expired(now):
		return LeaseTakeOver, fresh
	case mine:
		fresh.Acquired = cur.Acquired
		return LeaseRenew, fresh
	}
	return LeaseWait, wire.Lease{}
}

// stopMargin is how long before its lease expires an owner that could not
// renew stops the job.
func stopMargin(ttl time.Duration) time.Duration { return ttl / 5 }

// renewEvery is how often the keeper renews: three chances per TTL.
func renewEvery(ttl time.Duration) time.Duration { return ttl / 3 }
