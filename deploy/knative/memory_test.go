package knative_test

import (
	"testing"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/sluice-project/sluice/format/wds"
	"github.com/sluice-project/sluice/functions/image"
	"github.com/sluice-project/sluice/internal/bytesize"
)

// TestFunctionMemoryFits: the function's memory settings agree. The
// decode budget fn serve derives (image.BudgetFor the lower of
// GOMEMLIMIT and the container's limit) holds the largest image
// --max-pixels admits as a 16-bit PNG, and with every shard in flight
// holding a sample at the per-sample cap it stays within GOMEMLIMIT,
// itself under the container's limit. Before, 4 shards x 64-megapixel
// images were allowed 4 x 1 GB in a 2Gi container.
func TestFunctionMemoryFits(t *testing.T) {
	for _, dir := range []string{"base", "overlays/example"} {
		svc := decode[servingv1.Service](t, find(render(t, dir), "serving.knative.dev/v1", "Service")[0])
		c := svc.Spec.Template.Spec.Containers[0]
		limit := c.Resources.Limits.Memory().Value()
		var goLimit int64
		for _, e := range c.Env {
			if e.Name == "GOMEMLIMIT" {
				n, err := bytesize.Parse(e.Value)
				if err != nil {
					t.Fatalf("%s: GOMEMLIMIT %q: %v", dir, e.Value, err)
				}
				goLimit = n
			}
		}
		if goLimit == 0 || goLimit > limit*95/100 || goLimit < limit*80/100 {
			t.Errorf("%s: GOMEMLIMIT %d, want 80%%..95%% of the container's memory limit %d", dir, goLimit, limit)
			continue
		}
		budget := image.BudgetFor(min(goLimit, limit)).Total()
		const maxPixels = image.DefaultMaxPixels // the manifests leave --max-pixels at its default
		if need := int64(maxPixels) * (8 + 3); need > budget {
			t.Errorf("%s: a %d-pixel 16-bit PNG takes %s to decode, over the %s decode budget", dir, maxPixels,
				bytesize.Format(need), bytesize.Format(budget))
		}
		cc := int64(*svc.Spec.Template.Spec.ContainerConcurrency)
		if used := budget + cc*wds.DefaultMaxSampleBytes; used > goLimit {
			t.Errorf("%s: decode budget %s and %d samples at the per-sample cap take %s, over GOMEMLIMIT %s", dir,
				bytesize.Format(budget), cc, bytesize.Format(used), bytesize.Format(goLimit))
		}
	}
}
