package connect

import (
	"fmt"
	"strconv"
	"strings"
)

// MinServerVersion is the oldest nats-server Sluice works with. nats.go's
// jetstream package creates consumers by name
// ($JS.API.CONSUMER.CREATE.<stream>.<name>.<filter>) and reads key-value
// entries with direct gets, both new in 2.9.0: against 2.8.4 `job submit`
// waited until "creating task consumer: context deadline exceeded", which
// does not say a newer server is needed, so ConnectNATS refuses older
// servers at once. Checked by hand with the real 2.8.4, 2.9.0 and 2.9.10
// (submit, controller, agent, cancel, delete); the tests run 2.15.
const MinServerVersion = "2.9.0"

// checkServerVersion refuses a server older than MinServerVersion. A
// version it cannot read (a development build) is let through: the
// server's own errors then tell.
func checkServerVersion(found string) error {
	v, ok := parseVersion(found)
	if !ok {
		return nil
	}
	least, _ := parseVersion(MinServerVersion)
	for i := range v {
		if v[i] != least[i] {
			if v[i] < least[i] {
				return fmt.Errorf("%w: nats-server %s; Sluice needs %s or newer", ErrNATSServerTooOld, found, MinServerVersion)
			}
			return nil
		}
	}
	return nil
}

// parseVersion reads major.minor.patch from "v2.10.3", "2.10.0-RC.1" or
// "2.11.0+build"; a pre-release counts as its release.
func parseVersion(s string) ([3]int, bool) {
	var v [3]int
	s = strings.TrimPrefix(s, "v")
	if i := strings.IndexAny(s, "-+"); i >= 0 {
		s = s[:i]
	}
	parts := strings.Split(s, ".")
	if len(parts) != 3 {
		return v, false
	}
	for i, p := range parts {
		n, err := strconv.Atoi(p)
		if err != nil || n < 0 {
			return v, false
		}
		v[i] = n
	}
	return v, true
}
