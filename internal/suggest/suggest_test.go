package suggest

import "testing"

func TestEditDistance(t *testing.T) {
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"epoch", "epochs", 1}, {"colour_jitter", "color_jitter", 1},
		{"kitten", "sitting", 3}, {"", "abc", 3}, {"abc", "", 3},
	} {
		if got := EditDistance(c.a, c.b); got != c.want {
			t.Errorf("EditDistance(%q, %q) = %d, want %d", c.a, c.b, got, c.want)
		}
	}
}
