package knative

import "sort"

// ShareReady splits ready pods of one Service between the jobs that share
// it, in proportion to the replicas each requested, never more than a job
// requested; the rounding's remainder goes one pod at a time to the job
// with the largest fraction left (ties in name order). Pods beyond what
// all jobs requested (the KPA has not scaled down yet) are given to none.
func ShareReady(requested map[string]int, ready int) map[string]int {
	out := make(map[string]int, len(requested))
	total := 0
	names := make([]string, 0, len(requested))
	for job, n := range requested {
		if n > 0 {
			total += n
			names = append(names, job)
		}
		out[job] = 0
	}
	if total == 0 || ready <= 0 {
		return out
	}
	if ready >= total {
		for _, job := range names {
			out[job] = requested[job]
		}
		return out
	}
	sort.Strings(names)
	type rest struct {
		job  string
		frac int // remainder numerator over total
	}
	rests := make([]rest, 0, len(names))
	given := 0
	for _, job := range names {
		share := requested[job] * ready
		out[job] = share / total
		given += out[job]
		rests = append(rests, rest{job, share % total})
	}
	sort.SliceStable(rests, func(i, j int) bool { return rests[i].frac > rests[j].frac })
	for i := 0; given < ready && i < len(rests); i++ {
		out[rests[i].job]++
		given++
	}
	return out
}

// Floor is the min-scale the Service needs for the running jobs: the sum of
// their MinReplicas, capped at maxScale when that is set (> 0).
func Floor(mins map[string]int, maxScale int) int {
	n := 0
	for _, m := range mins {
		n += max(m, 0)
	}
	if maxScale > 0 {
		n = min(n, maxScale)
	}
	return n
}
