package local

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sluice-project/sluice/functions/shardcache"
	"github.com/sluice-project/sluice/internal/connect"
)

func TestWithCacheHandsTheFlagsToReplicas(t *testing.T) {
	base := FnServe([]string{"sluice", "fn", "serve"}, 1, 1, connect.Default())
	o := base.WithCache(shardcache.Config{Dir: "/var/cache/sluice", DiskBytes: 20 << 30, MemoryBytes: 512 << 20, IdleHorizon: time.Minute})
	got := strings.Join(o.Command, " ")
	for _, want := range []string{"--cache-dir /var/cache/sluice", "--cache-bytes 21474836480", "--cache-memory-bytes 536870912", "--cache-idle-horizon 1m0s"} {
		if !strings.Contains(got, want) {
			t.Errorf("replica command %q lacks %q", got, want)
		}
	}
	if !slices.Equal(base.WithCache(shardcache.Config{}).Command, base.Command) {
		t.Error("no cache changed the command")
	}
	if len(base.Command) == len(o.Command) {
		t.Error("WithCache changed the options it was called on")
	}
}
