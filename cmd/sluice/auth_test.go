package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/sluice-project/sluice/internal/bearer"
	"github.com/sluice-project/sluice/internal/ready"
	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/synth"
	"github.com/sluice-project/sluice/wire"
)

func testToken(t *testing.T, s string) bearer.Token {
	t.Helper()
	tok, err := bearer.Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// do sends a request with tok (none when zero) and returns the status,
// the WWW-Authenticate header and the body.
func do(t *testing.T, method, url string, tok bearer.Token, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	tok.Authorize(req)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("WWW-Authenticate"), string(b)
}

// doUnix is do on the agent's Unix socket (wire/agentsocket.go), one
// connection per request, for answers that come inline.
func doUnix(t *testing.T, sock, method, path string, tok bearer.Token, body string) (int, string, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://agent"+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	tok.Authorize(req)
	var raw bytes.Buffer
	if err := req.Write(&raw); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := c.Write(append(binary.BigEndian.AppendUint32(nil, uint32(raw.Len())), raw.Bytes()...)); err != nil {
		t.Fatal(err)
	}
	var n [4]byte
	if _, err := io.ReadFull(c, n[:]); err != nil {
		t.Fatal(err)
	}
	js := make([]byte, binary.BigEndian.Uint32(n[:]))
	if _, err := io.ReadFull(c, js); err != nil {
		t.Fatal(err)
	}
	var head wire.AgentSocketHead
	if err := json.Unmarshal(js, &head); err != nil || head.FD || head.Buffer != 0 {
		t.Fatalf("head %s (%v): want an inline answer", js, err)
	}
	b := make([]byte, head.Length)
	if _, err := io.ReadFull(c, b); err != nil {
		t.Fatal(err)
	}
	return head.Status, http.Header(head.Header).Get("WWW-Authenticate"), string(b)
}

// TestFnServeRequiresTheToken: `fn serve` given a token (here through
// SLUICE_FN_TOKEN) answers a task without it, or with another, 401, and
// processes it with it; its probes and metrics stay open.
func TestFnServeRequiresTheToken(t *testing.T) {
	ctx := context.Background()
	s3c, s3cfg := testenv.S3(t, "data")
	shards, err := synth.Images(synth.ImageOptions{Samples: 8, Shards: 1, Seed: 1, MinSide: 64, MaxSide: 96, Quality: 90, Classes: 2})
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Upload(ctx, s3c, "data", "ds/", shards); err != nil {
		t.Fatal(err)
	}
	tok := testToken(t, "fn-serve-token-0123456789abcdef")
	cmd := exec.Command(os.Args[0], "fn", "serve", "--listen", "127.0.0.1:0", "--s3-endpoint", s3cfg.Endpoint, "--log-level", "warn")
	cmd.Env = append(append(os.Environ(), replicaEnv+"=1", tok.Env(bearer.Function.Env)), testenv.S3Env()...)
	url := testenv.StartReady(t, cmd)
	if strings.Contains(strings.Join(cmd.Args, " "), tok.Reveal()) {
		t.Fatal("the token is on the command line")
	}

	task := wire.ShardTask{Job: "auth", Bucket: "data", Key: "ds/" + shards[0].Name, Pipeline: "imagenet-train", Seed: 1, ChunkMaxBytes: 1 << 20}
	post := func(tok bearer.Token) *http.Response {
		ev := event.New()
		ev.SetID(task.ID())
		ev.SetSource(wire.EventSource)
		ev.SetType(wire.EventTypeShardTask)
		if err := ev.SetData(event.ApplicationJSON, task); err != nil {
			t.Fatal(err)
		}
		req, err := cehttp.NewHTTPRequestFromEvent(ctx, url, ev)
		if err != nil {
			t.Fatal(err)
		}
		tok.Authorize(req)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return resp
	}
	for _, tc := range []struct {
		name      string
		tok       bearer.Token
		challenge string
	}{
		{"no token", bearer.Token{}, `Bearer realm="sluice"`},
		{"another token", testToken(t, "not-the-token-0123456789abcdef"), `Bearer realm="sluice", error="invalid_token"`},
	} {
		resp := post(tc.tok)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusUnauthorized || resp.Header.Get("WWW-Authenticate") != tc.challenge {
			t.Errorf("%s: %s, WWW-Authenticate %q: %s; want 401, %q", tc.name, resp.Status, resp.Header.Get("WWW-Authenticate"), body, tc.challenge)
		}
	}
	resp := post(tok)
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("with the token: %s: %s", resp.Status, b)
	}
	fr := wire.NewFrameReader(resp.Body, task.ChunkMaxBytes)
	for {
		f, err := fr.Next()
		if err != nil {
			t.Fatalf("the shard's stream: %v", err)
		}
		if f.Kind == wire.FrameEnd {
			break
		}
	}
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		if code, _, body := do(t, "GET", url+p, bearer.Token{}, ""); code != http.StatusOK {
			t.Errorf("GET %s without a token: %d %s", p, code, body)
		}
	}
}

// TestAgentCommandRequiresTheToken: the attacks on `sluice agent`,
// now without the agent's token: a GET /v1/batch with a world size of
// two billion, a POST /v1/resume of a world size of 7 (which locked the
// real trainer out with 409s), a batch taken: each gets 401 and changes
// nothing, and the trainer with the token then gets every sample of
// every epoch once. The agent sends its function token to the replica,
// which requires it. Both tokens come from files.
func TestAgentCommandRequiresTheToken(t *testing.T) {
	srv, nc, js := agentTestNATS(t)
	agentTok := testToken(t, "agent-token-0123456789abcdef")
	fnTok := testToken(t, "fn-token-0123456789abcdef")
	dir := t.TempDir()
	agentFile, fnFile := filepath.Join(dir, "agent"), filepath.Join(dir, "fn")
	for f, tok := range map[string]bearer.Token{agentFile: agentTok, fnFile: fnTok} {
		if err := os.WriteFile(f, []byte(tok.Reveal()+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	want := submitAgentTestJobWith(t, nc, js, "authed", fnTok)
	sock := filepath.Join(dir, "agent.sock")
	cmd, url := startAgent(t, "--job", "authed", "--nats", srv.URL(), "--agent-token-file", agentFile, "--fn-token-file", fnFile,
		"--listen-unix", sock)

	wrong := testToken(t, "not-the-token-0123456789abcdef")
	for _, tc := range []struct {
		method, path, body string
		tok                bearer.Token
	}{
		{"GET", "/v1/batch?world_size=2000000000&rank=0", "", bearer.Token{}},
		{"POST", "/v1/resume?world_size=7", `{"v":1,"position":null}`, bearer.Token{}},
		{"GET", "/v1/batch", "", bearer.Token{}},
		{"GET", "/v1/batch", "", wrong},
		{"POST", "/r/" + wire.DefaultReader + "/v1/resume?world_size=7", `{"v":1,"position":null}`, wrong},
		{"GET", "/v1/stats", "", bearer.Token{}},
	} {
		code, challenge, body := do(t, tc.method, url+tc.path, tc.tok, tc.body)
		if code != http.StatusUnauthorized || !strings.HasPrefix(challenge, "Bearer") {
			t.Errorf("%s %s with token %v: %d %q %s; want 401 and a Bearer challenge", tc.method, tc.path, tc.tok, code, challenge, body)
		}
		// The same on the Unix socket: its file's mode is not the only check.
		code, challenge, body = doUnix(t, sock, tc.method, tc.path, tc.tok, tc.body)
		if code != http.StatusUnauthorized || !strings.HasPrefix(challenge, "Bearer") {
			t.Errorf("unix socket: %s %s with token %v: %d %q %s; want 401 and a Bearer challenge", tc.method, tc.path, tc.tok, code, challenge, body)
		}
	}
	if code, _, body := doUnix(t, sock, "GET", "/v1/stats", agentTok, ""); code != http.StatusOK || !strings.Contains(body, "batches_delivered") {
		t.Errorf("unix socket: GET /v1/stats with the token: %d %s", code, body)
	}
	for _, p := range []string{"/healthz", "/metrics"} {
		if code, _, body := do(t, "GET", url+p, bearer.Token{}, ""); code != http.StatusOK {
			t.Errorf("GET %s without a token: %d %s", p, code, body)
		}
	}
	// Nothing was taken, resumed or fixed: the stats say so.
	code, _, body := do(t, "GET", url+"/v1/stats", agentTok, "")
	var st struct {
		BatchesDelivered int64 `json:"batches_delivered"`
		WorldSize        int   `json:"world_size"`
	}
	if err := json.Unmarshal([]byte(body), &st); code != http.StatusOK || err != nil || st.BatchesDelivered != 0 || st.WorldSize > 1 {
		t.Errorf("stats after the refused requests: %d %s (%v); want no batch delivered and no world size but 1", code, body, err)
	}

	got := map[string]bool{}
	getBatchesWith(t, url, agentTok, got, -1)
	if len(got) != len(want) {
		t.Errorf("delivered %d samples, want %d", len(got), len(want))
	}
	if code := waitExit(t, cmd); code != 0 {
		t.Errorf("agent exit %d after delivering everything, want 0", code)
	}
}

// TestCommandsRefuseAnOpenListenerBeyondLoopback: `fn serve` and `sluice
// agent` asked to listen beyond loopback without a token exit 1 at once,
// naming the ways to give one and the opt-out, before binding.
func TestCommandsRefuseAnOpenListenerBeyondLoopback(t *testing.T) {
	t.Setenv(bearer.Function.Env, "")
	t.Setenv(bearer.Agent.Env, "")
	for _, args := range [][]string{
		{"fn", "serve", "--listen", ":0", "--s3-endpoint", "http://127.0.0.1:1"},
		{"agent", "--job", "j", "--listen", "0.0.0.0:0", "--nats", "nats://127.0.0.1:1"},
	} {
		code, stdout, stderr := runCLI(t, args...)
		if code != 1 || strings.Contains(stdout, ready.Prefix) || !strings.Contains(stderr, "beyond loopback, without a token") ||
			!strings.Contains(stderr, "--insecure-no-auth") || !strings.Contains(stderr, "SLUICE_") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 1 and why", args, code, stdout, stderr)
		}
	}
}

// TestTokenProblemsAreUsageErrors: a token file that cannot be read, an
// empty one, a token too short: exit 2 naming the source, never the value.
func TestTokenProblemsAreUsageErrors(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		env  string // NAME=value, or ""
		args []string
		want string
	}{
		{"", []string{"fn", "serve", "--fn-token-file", filepath.Join(dir, "none")}, "--fn-token-file " + filepath.Join(dir, "none") + ": reading the token"},
		{"", []string{"controller", "--fn-token-file", empty}, "--fn-token-file " + empty + ": empty"},
		{"SLUICE_AGENT_TOKEN=tooshort", []string{"agent", "--job", "j"}, "SLUICE_AGENT_TOKEN: 8 bytes, want at least 16"},
		{"SLUICE_FN_TOKEN_FILE=" + empty, []string{"agent", "--job", "j"}, "SLUICE_FN_TOKEN_FILE " + empty + ": empty"},
	} {
		t.Run(strings.Join(tc.args[:1], " "), func(t *testing.T) {
			if k, v, ok := strings.Cut(tc.env, "="); ok {
				t.Setenv(k, v)
			}
			code, _, stderr := runCLI(t, tc.args...)
			if code != 2 || !strings.Contains(stderr, tc.want) || strings.Contains(stderr, "tooshort") {
				t.Errorf("%s %v: exit %d, stderr %q; want 2 and %q", tc.env, tc.args, code, stderr, tc.want)
			}
		})
	}
}
