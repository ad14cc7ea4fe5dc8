package bytesize

import "testing"

func TestFormat(t *testing.T) {
	for n, want := range map[int64]string{0: "0 B", 1023: "1023 B", 1024: "1.0 KiB", 64 << 10: "64.0 KiB",
		2_200_000: "2.1 MiB", 3 << 30: "3.0 GiB", 5 << 40: "5.0 TiB", -2048: "-2.0 KiB"} {
		if got := Format(n); got != want {
			t.Errorf("Format(%d) = %q, want %q", n, got, want)
		}
	}
}
