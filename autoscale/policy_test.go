package autoscale

import (
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/wire"
)

var t0 = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

func sec(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// demand builds a signal: stall fraction, samples/s consumed and arrived,
// buffer fill out of 100.
func demand(stall, consumed, arrived float64, buffered int) *wire.Demand {
	return &wire.Demand{StallFraction: stall, ConsumedPerS: consumed, ArrivedPerS: arrived,
		BufferedSamples: buffered, BufferCapacity: 100, IntervalS: 1}
}

func TestDecide(t *testing.T) {
	cfg := DefaultConfig() // max 8, initial 1, target stall 5%, headroom 1.2, step +2/x2, delay 5s, stale 5s
	now := sec(100)
	fresh := sec(99.5)
	for _, tc := range []struct {
		name   string
		cfg    func(*Config)
		st     State
		in     Inputs
		want   int
		reason string // a substring of the reason
	}{
		{name: "activation from zero",
			in: Inputs{Pending: 48}, want: 1, reason: "activate from zero: 48 tasks pending"},
		{name: "activation bounded by tasks",
			cfg: func(c *Config) { c.InitialReplicas = 4 }, in: Inputs{Pending: 2}, want: 2, reason: "activate from zero"},
		{name: "activation at least min",
			cfg: func(c *Config) { c.MinReplicas = 3 }, in: Inputs{Pending: 10}, want: 3, reason: "activate from zero"},
		{name: "nothing to do stays at zero",
			in: Inputs{}, want: 0, reason: "no tasks pending or in flight"},
		{name: "job done goes to zero at once",
			st: State{Replicas: 5, Wants: []Want{{sec(99), 5}}}, in: Inputs{Pending: 3, Done: true, Demand: demand(0.9, 1, 1, 0), DemandAt: fresh},
			want: 0, reason: "job done"},
		{name: "agent's final signal is done too",
			st: State{Replicas: 2}, in: Inputs{Pending: 1, Demand: &wire.Demand{Done: true}, DemandAt: fresh}, want: 0, reason: "job done"},
		{name: "idle goes to min at once",
			cfg: func(c *Config) { c.MinReplicas = 1 }, st: State{Replicas: 4, Wants: []Want{{sec(99), 4}}}, in: Inputs{}, want: 1, reason: "no tasks"},
		{name: "no demand holds",
			st: State{Replicas: 3}, in: Inputs{Pending: 10, Ready: 3}, want: 3, reason: "no fresh demand: hold 3"},
		{name: "stale demand holds",
			st: State{Replicas: 3}, in: Inputs{Pending: 10, Ready: 3, Demand: demand(0.9, 0, 0, 0), DemandAt: sec(94)},
			want: 3, reason: "no fresh demand"},
		{name: "stall scales to the appetite",
			// appetite 90/(1-0.4) = 150/s; 50/s per replica; 1.2*150/50 = 3.6
			st: State{Replicas: 2}, in: Inputs{Pending: 20, InFlight: 2, Ready: 2, Demand: demand(0.4, 90, 100, 0), DemandAt: fresh},
			want: 4, reason: "trainer stalled 40%: need 4 (3.6 replicas of 50/s each)"},
		{name: "stall scale up is limited per step",
			// appetite 100/s, 10/s per replica: 12 wanted, 1 -> 3 at most
			st: State{Replicas: 1}, in: Inputs{Pending: 20, Ready: 1, Demand: demand(0.5, 50, 10, 0), DemandAt: fresh},
			want: 3, reason: "; 3 this step"},
		{name: "stall scale up is limited by max replicas",
			st: State{Replicas: 6}, in: Inputs{Pending: 50, Ready: 6, Demand: demand(0.5, 50, 60, 0), DemandAt: fresh},
			want: 8, reason: "capped at 8 by max replicas"},
		{name: "stall scale up is limited by the tasks that could run",
			st: State{Replicas: 2}, in: Inputs{Pending: 1, InFlight: 2, Ready: 2, Demand: demand(0.5, 50, 20, 0), DemandAt: fresh},
			want: 3, reason: "capped at 3 by 3 tasks pending or in flight"},
		{name: "stall while replicas start holds",
			st: State{Replicas: 3}, in: Inputs{Pending: 30, Ready: 1, Demand: demand(1, 0, 0, 0), DemandAt: fresh},
			want: 3, reason: "while 2 of 3 replicas start: hold"},
		{name: "samples arriving before the first replica is reported ready size the scale-up",
			// appetite 40/(1-0.6) = 100/s; 40/s from the one replica that
			// must serve; 1.2*100/40 = 3
			st: State{Replicas: 1}, in: Inputs{Pending: 30, Ready: 0, Demand: demand(0.6, 40, 40, 0), DemandAt: fresh},
			want: 3, reason: "trainer stalled 60%: need 3 (3.0 replicas of 40/s each)"},
		{name: "starved trainer with every replica ready adds one",
			st: State{Replicas: 3}, in: Inputs{Pending: 30, Ready: 3, Demand: demand(1, 0, 0, 0), DemandAt: fresh},
			want: 4, reason: "no per-replica rate to size by yet: add one"},
		{name: "starved trainer with a known rate adds one",
			st: State{Replicas: 3, PerReplica: 40}, in: Inputs{Pending: 30, Ready: 3, Demand: demand(1, 0, 30, 0), DemandAt: fresh},
			want: 4, reason: "starved (no batch in the interval): add one"},
		{name: "mild stall the current replicas cover holds",
			st: State{Replicas: 4, PerReplica: 50}, in: Inputs{Pending: 30, Ready: 4, Demand: demand(0.1, 90, 200, 0), DemandAt: fresh},
			want: 4, reason: "cover 100/s: hold"},
		{name: "healthy holds",
			st: State{Replicas: 3}, in: Inputs{Pending: 30, Ready: 3, Demand: demand(0.01, 90, 90, 40), DemandAt: fresh},
			want: 3, reason: "stall 1%, buffer 40% full: hold 3"},
		{name: "over-supplied scales down once the window allows",
			// 1.2 * 40/s / 50/s per replica = 0.96 -> 1
			st: State{Replicas: 4, PerReplica: 50, Wants: []Want{{sec(90), 4}}}, in: Inputs{Pending: 30, Ready: 4, Demand: demand(0, 40, 40, 90), DemandAt: fresh},
			want: 1, reason: "buffer 90% full, stall 0%: 1 replicas of 50/s each cover 40/s"},
		{name: "over-supplied holds within the scale-down delay",
			st: State{Replicas: 4, PerReplica: 50, Wants: []Want{{sec(97), 4}}}, in: Inputs{Pending: 30, Ready: 4, Demand: demand(0, 40, 40, 90), DemandAt: fresh},
			want: 4, reason: "holding 4 for the scale-down delay"},
		{name: "over-supplied never below min while work remains",
			cfg: func(c *Config) { c.MinReplicas = 2 },
			st:  State{Replicas: 4, PerReplica: 50}, in: Inputs{Pending: 30, Ready: 4, Demand: demand(0, 10, 10, 100), DemandAt: fresh},
			want: 2},
		{name: "at least one while tasks are pending",
			st: State{Replicas: 2, PerReplica: 50}, in: Inputs{Pending: 5, Ready: 2, Demand: demand(0, 0, 0, 100), DemandAt: fresh},
			want: 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := cfg
			if tc.cfg != nil {
				tc.cfg(&c)
			}
			if err := c.Validate(); err != nil {
				t.Fatal(err)
			}
			dec, next := Decide(c, tc.st, tc.in, now)
			if dec.Replicas != tc.want || !strings.Contains(dec.Reason, tc.reason) {
				t.Errorf("Decide = %d %q, want %d with %q", dec.Replicas, dec.Reason, tc.want, tc.reason)
			}
			if next.Replicas != dec.Replicas {
				t.Errorf("next state has %d replicas, decision %d", next.Replicas, dec.Replicas)
			}
			if dec.Reason == "" {
				t.Error("empty reason")
			}
		})
	}
}

// step is one scripted decision: inputs at a time and the count expected.
type step struct {
	at   float64
	in   Inputs
	want int
}

func runScript(t *testing.T, cfg Config, st State, script []step) State {
	t.Helper()
	for i, s := range script {
		var dec Decision
		dec, st = Decide(cfg, st, s.in, sec(s.at))
		if dec.Replicas != s.want {
			t.Fatalf("step %d (t=%vs): %d replicas (%s), want %d", i, s.at, dec.Replicas, dec.Reason, s.want)
		}
	}
	return st
}

func TestDecideScaleDownWaitsForTheDelay(t *testing.T) {
	cfg := DefaultConfig()
	at := func(s float64, d *wire.Demand, pending int) Inputs {
		return Inputs{Pending: pending, Ready: 8, Demand: d, DemandAt: sec(s)}
	}
	starved := demand(0.5, 100, 200, 0) // 200/s from 4 replicas: 50 each; appetite 200 -> 4.8 -> 5
	full := demand(0, 100, 100, 95)     // 1.2 * 100 / 50 = 2.4 -> 3
	st := runScript(t, cfg, State{}, []step{
		{0, Inputs{Pending: 100}, 1},
		{1, Inputs{Pending: 100, Ready: 1, Demand: demand(1, 0, 0, 0), DemandAt: sec(1)}, 2},
		{2, Inputs{Pending: 100, Ready: 1, Demand: demand(1, 0, 0, 0), DemandAt: sec(2)}, 2}, // one still starting
		{3, Inputs{Pending: 100, Ready: 2, Demand: demand(1, 0, 100, 0), DemandAt: sec(3)}, 3},
		{4, Inputs{Pending: 100, Ready: 4, Demand: starved, DemandAt: sec(4)}, 5},
		{5, at(5, full, 100), 5}, // over-supplied, but 5 was wanted within 5s
		{9, at(9, full, 100), 5},
		{10.5, at(10.5, full, 100), 3},
		{11, at(11, demand(0.01, 100, 100, 50), 100), 3}, // healthy: hold
		{12, at(12, full, 2), 3},                         // two tasks left: at most 2, after the delay
		{17.5, at(17.5, full, 2), 2},
		{18, Inputs{Done: true}, 0},
	})
	if st.PerReplica < 40 || st.PerReplica > 60 {
		t.Errorf("learned %v samples/s per replica, want about 50", st.PerReplica)
	}
}

func TestDecideLearnsThroughputOnlyWhileArrivalsAreFree(t *testing.T) {
	cfg := DefaultConfig()
	st := State{Replicas: 4, PerReplica: 50}
	// A full buffer throttles arrivals to the trainer's pace: 10/s from 4
	// replicas says nothing about what a replica can do.
	_, next := Decide(cfg, st, Inputs{Pending: 10, Ready: 4, Demand: demand(0, 10, 10, 80), DemandAt: sec(0)}, sec(0))
	if next.PerReplica != 50 {
		t.Errorf("after a throttled interval: %v per replica, want 50 kept", next.PerReplica)
	}
	_, next = Decide(cfg, st, Inputs{Pending: 10, Ready: 4, Demand: demand(0, 100, 120, 20), DemandAt: sec(0)}, sec(0))
	if next.PerReplica != 40 { // (50 + 30) / 2
		t.Errorf("after a free interval: %v per replica, want 40", next.PerReplica)
	}
	if st.PerReplica != 50 {
		t.Error("Decide modified its input state")
	}
}

func TestConfigValidate(t *testing.T) {
	if err := DefaultConfig().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	for field, mutate := range map[string]func(*Config){
		"max replicas":     func(c *Config) { c.MaxReplicas = 0 },
		"min replicas":     func(c *Config) { c.MinReplicas = 9 },
		"initial replicas": func(c *Config) { c.InitialReplicas = 0 },
		"target stall":     func(c *Config) { c.TargetStall = 1 },
		"headroom":         func(c *Config) { c.Headroom = 0.5 },
		"scale down delay": func(c *Config) { c.ScaleDownDelay = -time.Second },
		"max step up":      func(c *Config) { c.MaxStepUp = 0 },
		"demand stale":     func(c *Config) { c.DemandStale = 0 },
		"cluster capacity": func(c *Config) { c.ClusterCapacity = -1 },
	} {
		c := DefaultConfig()
		mutate(&c)
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), field) || !strings.Contains(err.Error(), "want") {
			t.Errorf("%s out of range: err = %v, want one naming the field and the range", field, err)
		}
	}
	if c := DefaultConfig(); c.Capacity() != c.MaxReplicas {
		t.Errorf("default capacity %d, want max replicas %d", c.Capacity(), c.MaxReplicas)
	}
}
