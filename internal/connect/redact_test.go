package connect

import (
	"errors"
	"strings"
	"testing"
)

func TestRedactURL(t *testing.T) {
	for raw, want := range map[string]string{
		"nats://alice:S3cretPW@127.0.0.1:4222": "nats://alice:" + redacted + "@127.0.0.1:4222",
		"nats://tok-123@127.0.0.1:4222":        "nats://" + redacted + "@127.0.0.1:4222", // a token alone
		"alice:pw@127.0.0.1:4222":              "alice:" + redacted + "@127.0.0.1:4222",
		"nats://alice:pa/ss@bad host:1":        "nats://alice:" + redacted + "@bad host:1", // not a URL: still redacted
		"nats://a:b@c@127.0.0.1:1":             "nats://a:" + redacted + "@127.0.0.1:1",
		"http://key:secret@s3:9000/path":       "http://key:" + redacted + "@s3:9000/path",
		"nats://127.0.0.1:4222":                "nats://127.0.0.1:4222",
		"":                                     "",
	} {
		if got := RedactURL(raw); got != want {
			t.Errorf("RedactURL(%q) = %q, want %q", raw, got, want)
		}
	}
}

// TestConnectNATSErrorHidesURLPassword: `sluice job list --nats
// nats://alice:S3cretPW@127.0.0.1:1` printed the password in its error.
func TestConnectNATSErrorHidesURLPassword(t *testing.T) {
	for _, url := range []string{"nats://alice:S3cretPW@127.0.0.1:1", "nats://S3cretPW@127.0.0.1:1"} {
		c := Default()
		c.NATS.URLs = []string{url, "nats://127.0.0.1:2"}
		err := connectErr(t, c)
		if !errors.Is(err, ErrNATSUnreachable) || strings.Contains(err.Error(), "S3cretPW") || !strings.Contains(err.Error(), "127.0.0.1:1") {
			t.Errorf("%s: %v; want unreachable, naming the server without the secret", url, err)
		}
	}
}

// TestResolveErrorsHideURLSecrets: a URL refused by validation is named
// without its password.
func TestResolveErrorsHideURLSecrets(t *testing.T) {
	_, err := resolveWith(t, PartAll, []string{"--nats", "nats://alice:S3cretPW@bad host:1", "--s3-endpoint", "ftp://key:S3cretPW@s3"}, nil)
	if err == nil || strings.Contains(err.Error(), "S3cretPW") || !strings.Contains(err.Error(), "--nats") || !strings.Contains(err.Error(), "--s3-endpoint") {
		t.Errorf("got %v; want both URLs refused without their secrets", err)
	}
	_, err = resolveWith(t, PartS3, []string{"--s3-endpoint", "http://key:S3cretPW@127.0.0.1:9000"}, nil)
	if err == nil || strings.Contains(err.Error(), "S3cretPW") || !strings.Contains(err.Error(), "AWS") {
		t.Errorf("credentials in the S3 endpoint: %v; want them refused (they come from the AWS chain), unquoted", err)
	}
}

// TestChildArgsHoldNoURLSecret: a NATS URL with userinfo reaches a child
// through its environment, not its argv.
func TestChildArgsHoldNoURLSecret(t *testing.T) {
	parent := Default()
	parent.NATS.URLs = []string{"nats://alice:S3cretPW@a:4222", "nats://b:4222"}
	args, env := parent.Args(PartAll), parent.Env(PartAll)
	if strings.Contains(strings.Join(args, " "), "S3cretPW") {
		t.Errorf("secret on argv: %q", args)
	}
	envMap := map[string]string{}
	for _, kv := range env {
		k, v, _ := strings.Cut(kv, "=")
		envMap[k] = v
	}
	child, err := resolveWith(t, PartAll, args, envMap)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(child.NATS.URLs, ",") != strings.Join(parent.NATS.URLs, ",") {
		t.Errorf("child's URLs %q, want the parent's", child.NATS.URLs)
	}
}
