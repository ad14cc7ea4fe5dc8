package knative_test

import (
	"bufio"
	"bytes"
	"strconv"
)

func bufioReader(b []byte) *bufio.Reader { return bufio.NewReader(bytes.NewReader(b)) }

func fmtInt(n int64) string { return strconv.FormatInt(n, 10) }
