package testenv

import "github.com/prometheus/client_golang/prometheus"

// Counter is the value of counter name in g's series with label = value
// (0 when there is none).
func Counter(g prometheus.Gatherer, name, label, value string) (float64, error) {
	mfs, err := g.Gather()
	if err != nil {
		return 0, err
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label && l.GetValue() == value {
					return m.GetCounter().GetValue(), nil
				}
			}
		}
	}
	return 0, nil
}
