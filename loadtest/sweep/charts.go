package sweep

import "github.com/sluice-project/sluice/loadtest/chart"

// Charts are the report's two charts, a line per run: live replicas, and
// trainer stall added up over the trainers and over time (trainer-seconds
// spent waiting for a batch, from the sampled count of waiting trainers),
// which lines of many runs can be told apart by where they level off.
func (rep Report) Charts() (replicas, stall []chart.Series) {
	for _, r := range rep.Runs {
		rs, ss := chart.Series{Name: r.Name}, chart.Series{Name: r.Name}
		var sum, last float64
		for _, p := range r.Timeline {
			sum += float64(p.Stalled) * (p.T - last)
			last = p.T
			rs.Points = append(rs.Points, [2]float64{p.T, float64(p.Replicas)})
			ss.Points = append(ss.Points, [2]float64{p.T, sum})
		}
		replicas, stall = append(replicas, rs), append(stall, ss)
	}
	return replicas, stall
}
