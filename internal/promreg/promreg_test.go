package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func newGauge() *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_test_gauge", Help: "A test gauge."}, []string{"job"})
}

func TestRegisterTwiceSharesTheSeries(t *testing.T) {
	reg := prometheus.NewRegistry()
	a := Register(reg, newGauge())
	b := Register(reg, newGauge())
	if a != b {
		t.Fatal("second Register returned a new collector, want the registered one")
	}
	b.WithLabelValues("j").Set(3)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	if len(mfs) != 1 || mfs[0].GetMetric()[0].GetGauge().GetValue() != 3 {
		t.Fatalf("gathered %v, want one gauge at 3", mfs)
	}
}

func TestRegisterWithoutRegistry(t *testing.T) {
	g := newGauge()
	if Register(nil, g) != g {
		t.Fatal("nil registry: want the collector back")
	}
}

func TestRegisterClashPanicsWithTheName(t *testing.T) {
	reg := prometheus.NewRegistry()
	Register(reg, newGauge())
	defer func() {
		if r := recover(); r == nil {
			t.Fatal("no panic for a clashing collector")
		}
	}()
	Register(reg, prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "sluice_test_gauge", Help: "Other help."}, []string{"other"}))
}
