package hostile

import (
	"bytes"
	"fmt"
)

// SparseTar is a tar of one sample, key, with members members named
// key.m0, key.m1, ..., each a sparse file of size bytes holding one data
// byte: the whole tar is a few KB per member however large size is.
// oldGNU picks the old GNU format (type 'S', what GNU tar --sparse writes
// by default); otherwise the members are PAX format 0.1 (GNU.sparse.*
// records, what --format=posix writes), which a reader sees as regular
// files of size bytes.
func SparseTar(key string, members int, size int64, oldGNU bool) []byte {
	var b bytes.Buffer
	for i := range members {
		name := fmt.Sprintf("%s.m%d", key, i)
		if oldGNU {
			b.Write(tarHeader(name, 1, 'S', true, func(h []byte) {
				// One sparse entry: 1 byte at offset 0; then the real size.
				copy(h[386:398], octal(0, 12))
				copy(h[398:410], octal(1, 12))
				copy(h[483:495], octal(size, 12))
			}))
		} else {
			records := paxRecord("GNU.sparse.major", "0") + paxRecord("GNU.sparse.minor", "1") +
				paxRecord("GNU.sparse.name", name) + paxRecord("GNU.sparse.realsize", fmt.Sprint(size)) +
				paxRecord("GNU.sparse.numblocks", "1") + paxRecord("GNU.sparse.map", "0,1")
			b.Write(tarHeader("PaxHeaders/"+name, int64(len(records)), 'x', false, nil))
			b.Write(padded([]byte(records)))
			b.Write(tarHeader("GNUSparseFile/"+name, 1, '0', false, nil))
		}
		b.Write(padded([]byte{7}))
	}
	b.Write(make([]byte, 1024)) // end of archive
	return b.Bytes()
}

// tarHeader is one 512-byte header block; set fills format-specific fields
// before the checksum is computed.
func tarHeader(name string, size int64, typeflag byte, gnu bool, set func([]byte)) []byte {
	h := make([]byte, 512)
	copy(h[0:100], name)
	copy(h[100:108], octal(0o644, 8))
	copy(h[108:116], octal(0, 8))
	copy(h[116:124], octal(0, 8))
	copy(h[124:136], octal(size, 12))
	copy(h[136:148], octal(0, 12))
	h[156] = typeflag
	if gnu {
		copy(h[257:265], "ustar  \x00")
	} else {
		copy(h[257:265], "ustar\x0000")
	}
	if set != nil {
		set(h)
	}
	copy(h[148:156], "        ")
	sum := 0
	for _, c := range h {
		sum += int(c)
	}
	copy(h[148:156], fmt.Sprintf("%06o\x00 ", sum))
	return h
}

func octal(n int64, width int) string { return fmt.Sprintf("%0*o\x00", width-1, n) }

// paxRecord is "LEN key=value\n", LEN counting the whole record.
func paxRecord(k, v string) string {
	body := " " + k + "=" + v + "\n"
	n := len(body) + 1
	for len(fmt.Sprint(n))+len(body) != n {
		n = len(fmt.Sprint(n)) + len(body)
	}
	return fmt.Sprint(n) + body
}

// padded pads data to whole 512-byte blocks.
func padded(data []byte) []byte {
	return append(data, make([]byte, (512-len(data)%512)%512)...)
}
