package wire

import "testing"

// TestReaderBucketKeysNeverCollide: no two records of the readers bucket
// share a key whatever the job and reader ids, those named like a kind
// of key included (ReaderKey("failed", "trainer") was
// ShardsFailedKey("trainer")).
func TestReaderBucketKeysNeverCollide(t *testing.T) {
	ids := []string{"failed", "trainer", "done", "pos", "failed-trainer", "x"}
	seen := map[string]string{}
	add := func(key, what string) {
		if other, dup := seen[key]; dup {
			t.Errorf("key %s is both %s and %s", key, other, what)
		}
		seen[key] = what
	}
	for _, job := range ids {
		add(ShardsFailedKey(job), "failed of "+job)
		for _, r := range ids {
			add(ReaderKey(job, r), "position of "+job+"/"+r)
			add(ReaderDoneKey(job, r), "done of "+job+"/"+r)
		}
	}
}
