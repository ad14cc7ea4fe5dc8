package connect

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
)

func TestCheckServerVersion(t *testing.T) {
	for found, ok := range map[string]bool{
		"2.8.4":        false, // times out creating a consumer by name
		"v2.8.99":      false,
		"1.4.1":        false,
		"2.9.0":        true,
		"2.9.0-RC.3":   true, // a pre-release of the minimum counts as it
		"2.9.10":       true, // Debian 12's package
		"2.10.29":      true,
		"2.15.2":       true,
		"v3.0.0":       true,
		"2.11.0+build": true,
		"":             true, // a server that does not say is not refused
		"dev":          true,
	} {
		err := checkServerVersion(found)
		if (err == nil) != ok {
			t.Errorf("%q: %v, want ok %v", found, err, ok)
		}
		if err != nil && (!errors.Is(err, ErrNATSServerTooOld) || !strings.Contains(err.Error(), found) || !strings.Contains(err.Error(), MinServerVersion)) {
			t.Errorf("%q: %v; want ErrNATSServerTooOld naming the version found and %s", found, err, MinServerVersion)
		}
	}
}

// TestConnectNATSRefusesAnOldServer: a server announcing 2.8.4 (a fake
// that speaks the start of the NATS protocol: INFO, then PONG to the
// client's PING) is refused at connect, with both versions named.
func TestConnectNATSRefusesAnOldServer(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				fmt.Fprintf(conn, "INFO {\"server_id\":\"OLD\",\"version\":\"2.8.4\",\"proto\":1,\"headers\":true,\"max_payload\":1048576}\r\n")
				r := bufio.NewReader(conn)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if strings.HasPrefix(line, "PING") {
						fmt.Fprint(conn, "PONG\r\n")
					}
				}
			}()
		}
	}()
	err = connectErr(t, natsConfig("nats://"+ln.Addr().String(), nil))
	if !errors.Is(err, ErrNATSServerTooOld) || !strings.Contains(err.Error(), "2.8.4") || !strings.Contains(err.Error(), MinServerVersion) {
		t.Errorf("old server: %v; want it refused, naming 2.8.4 and %s", err, MinServerVersion)
	}
}
