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

func TestFormatLarge(t *testing.T) {
	if got := Format(2048 << 40); got != "2048.0 TiB" {
		t.Errorf("Format(2048 TiB) = %q", got)
	}
}

func TestParse(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "1048576": 1 << 20, "64MiB": 64 << 20, "1 GiB": 1 << 30, "1.5GiB": 3 << 29,
		"512KiB": 512 << 10, "2TiB": 2 << 40, "100MB": 100e6, "3GB": 3e9, "7B": 7, " 4 KB ": 4000,
	} {
		if got, err := Parse(in); err != nil || got != want {
			t.Errorf("Parse(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "-1", "1XB", "MiB", "1 mib", "1e9", "99999999999999999999", "9999999999TiB"} {
		if got, err := Parse(in); err == nil {
			t.Errorf("Parse(%q) = %d, want an error", in, got)
		}
	}
}
