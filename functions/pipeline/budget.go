package pipeline

import (
	"fmt"

	"github.com/sluice-project/sluice/functions/image"
)

// reserveDecode takes what decoding the sample's image needs from the
// decode budget, before any pixel is decoded, waiting for room while the
// sample's context lasts. The reservation is held until the sample is
// done (finish), since its decoded pixels live until then. An image whose
// decoding alone needs more than the whole budget fails its sample.
func (st *state) reserveDecode() error {
	if st.budget == nil || st.unreserve != nil {
		return nil
	}
	cost, err := image.DecodeCost(st.enc)
	if err != nil {
		return fmt.Errorf("member %s: %w", st.member, err)
	}
	release, err := st.budget.Reserve(st.ctx, cost)
	if err != nil {
		return fmt.Errorf("member %s: %dx%d image: %w", st.member, st.srcW, st.srcH, err)
	}
	st.unreserve = release
	return nil
}
