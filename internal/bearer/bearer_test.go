package bearer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const secret = "s3cret-token-0123456789abcdef"

func mustParse(t *testing.T, s string) Token {
	t.Helper()
	tok, err := Parse(s)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

func TestParse(t *testing.T) {
	for _, s := range []string{secret, strings.Repeat("a", MinLength), "abc/def+ghi.jkl~mno_pqr==", strings.Repeat("x", MaxLength)} {
		if _, err := Parse(s); err != nil {
			t.Errorf("Parse(%.20q): %v", s, err)
		}
	}
	for _, tc := range []struct{ in, want string }{
		{"short", "5 bytes, want at least 16"},
		{strings.Repeat("x", MaxLength+1), "want at most 4096"},
		{secret + "\r\nX-Evil: 1", "not a letter, digit"},
		{"0123456789abcdef ghij", "byte 17 is not"},
		{"0123456789abcdef==x", "only = may follow ="},
	} {
		_, err := Parse(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%.30q): %v, want an error saying %q", tc.in, err, tc.want)
			continue
		}
		if len(tc.in) >= MinLength && strings.Contains(err.Error(), tc.in[:MinLength]) {
			t.Errorf("Parse's error quotes the token: %v", err)
		}
	}
}

// TestTokenNeverPrints: every way a token may reach a log or a message
// prints it redacted.
func TestTokenNeverPrints(t *testing.T) {
	tok := mustParse(t, secret)
	var logged bytes.Buffer
	logger := slog.New(slog.NewJSONHandler(&logged, nil))
	logger.Info("x", "token", tok, "opts", struct{ Token Token }{tok})
	slog.New(slog.NewTextHandler(&logged, nil)).Info("x", "token", tok)
	js, err := json.Marshal(struct{ Token Token }{tok})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{
		fmt.Sprint(tok), fmt.Sprintf("%v %+v %#v %s %q", tok, tok, tok, tok, tok),
		fmt.Sprintf("%v %+v %#v", struct{ T Token }{tok}, struct{ T Token }{tok}, struct{ T Token }{tok}),
		logged.String(), string(js), fmt.Sprint(fmt.Errorf("wrapped: %v", tok)),
	} {
		if strings.Contains(s, secret) {
			t.Errorf("the token shows in %q", s)
		}
		if !strings.Contains(s, "[redacted]") {
			t.Errorf("%q does not say [redacted]", s)
		}
	}
	if tok.Reveal() != secret || tok.Env("X") != "X="+secret {
		t.Error("Reveal or Env lost the value")
	}
	if (Token{}).String() != "[none]" || (Token{}).IsSet() {
		t.Error("the zero Token")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := file("good", secret+"\n")
	other := file("other", "another-token-0123456789\n")
	empty := file("empty", "\n")
	short := file("short", "abc\n")
	src := Source{Flag: "x-token-file", Env: "X_TOKEN"}
	for _, tc := range []struct {
		name    string
		path    string
		env     map[string]string
		want    string // the token, "" none
		wantErr string
	}{
		{name: "none"},
		{name: "the flag's file", path: good, want: secret},
		{name: "the flag over the environment", path: good, env: map[string]string{"X_TOKEN_FILE": other, "X_TOKEN": "a-third-token-0123456789"}, want: secret},
		{name: "the file variable over the value", env: map[string]string{"X_TOKEN_FILE": other, "X_TOKEN": secret}, want: "another-token-0123456789"},
		{name: "the value", env: map[string]string{"X_TOKEN": secret + "\n"}, want: secret},
		{name: "no such file", path: filepath.Join(dir, "nope"), wantErr: "--x-token-file " + filepath.Join(dir, "nope") + ": reading the token: open"},
		{name: "an empty file", env: map[string]string{"X_TOKEN_FILE": empty}, wantErr: "X_TOKEN_FILE " + empty + ": empty"},
		{name: "a short token", path: short, wantErr: "the token: 3 bytes, want at least 16"},
		{name: "a bad value", env: map[string]string{"X_TOKEN": secret + " x"}, wantErr: "X_TOKEN: byte 30 is not"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tok, err := src.Load(tc.path, func(k string) string { return tc.env[k] })
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err %v, want %q", err, tc.wantErr)
				}
				if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "abc") {
					t.Errorf("the error quotes the token: %v", err)
				}
				return
			}
			if err != nil || tok.Reveal() != tc.want {
				t.Fatalf("token %q, %v; want %q", tok.Reveal(), err, tc.want)
			}
		})
	}
}

// recordingBody notes whether a handler read it.
type recordingBody struct {
	io.Reader
	read bool
}

func (b *recordingBody) Read(p []byte) (int, error) { b.read = true; return b.Reader.Read(p) }

func TestRequire(t *testing.T) {
	tok := mustParse(t, secret)
	var logged bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
	served := 0
	h := Require(tok, Function, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served++
		io.Copy(io.Discard, r.Body)
		io.WriteString(w, "served")
	}), logger, "/healthz", "/metrics")
	for _, tc := range []struct {
		name      string
		method    string
		path      string
		auth      []string
		want      int
		challenge string // WWW-Authenticate of a 401
		body      string
	}{
		{name: "no token", method: "POST", path: "/", want: 401, challenge: `Bearer realm="sluice"`, body: "wants a bearer token"},
		{name: "the token", method: "POST", path: "/", auth: []string{"Bearer " + secret}, want: 200},
		{name: "the scheme in any case", method: "POST", path: "/", auth: []string{"bearer " + secret}, want: 200},
		{name: "a wrong token", method: "POST", path: "/", auth: []string{"Bearer " + secret + "x"}, want: 401,
			challenge: `Bearer realm="sluice", error="invalid_token"`, body: "wrong bearer token: the server's is set by --fn-token-file, SLUICE_FN_TOKEN_FILE or SLUICE_FN_TOKEN"},
		{name: "a prefix of the token", method: "POST", path: "/", auth: []string{"Bearer " + secret[:20]}, want: 401, challenge: `error="invalid_token"`},
		{name: "another scheme", method: "POST", path: "/", auth: []string{"Basic " + secret}, want: 401, challenge: `Bearer realm="sluice"`},
		{name: "two headers", method: "POST", path: "/", auth: []string{"Bearer " + secret, "Bearer " + secret}, want: 401},
		{name: "a public path", method: "GET", path: "/healthz", want: 200},
		{name: "a public path, HEAD", method: "HEAD", path: "/metrics", want: 200},
		{name: "POST to a public path", method: "POST", path: "/healthz", want: 401},
		{name: "below a public path", method: "GET", path: "/healthz/x", want: 401},
		{name: "a GET elsewhere", method: "GET", path: "/v1/batch", want: 401},
	} {
		t.Run(tc.name, func(t *testing.T) {
			served = 0
			body := &recordingBody{Reader: strings.NewReader("a task")}
			r := httptest.NewRequest(tc.method, tc.path, body)
			for _, a := range tc.auth {
				r.Header.Add("Authorization", a)
			}
			w := httptest.NewRecorder()
			h.ServeHTTP(w, r)
			if w.Code != tc.want {
				t.Fatalf("%d, want %d: %s", w.Code, tc.want, w.Body)
			}
			if tc.want != 401 {
				if served != 1 {
					t.Errorf("served %d times", served)
				}
				return
			}
			if served != 0 || body.read {
				t.Errorf("a refused request reached the handler (%d) or had its body read (%v)", served, body.read)
			}
			if got := w.Header().Get("WWW-Authenticate"); !strings.Contains(got, tc.challenge) || !strings.HasPrefix(got, "Bearer") {
				t.Errorf("WWW-Authenticate %q, want %q", got, tc.challenge)
			}
			if !strings.Contains(w.Body.String(), tc.body) {
				t.Errorf("body %q, want %q", w.Body, tc.body)
			}
		})
	}
	if strings.Contains(logged.String(), secret[:20]) {
		t.Errorf("the log has a token: %s", logged.String())
	}
	if !strings.Contains(logged.String(), "refused") {
		t.Errorf("no refusal logged at debug: %q", logged.String())
	}

	// No token: everything is served.
	open := Require(Token{}, Function, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}), nil)
	w := httptest.NewRecorder()
	open.ServeHTTP(w, httptest.NewRequest("POST", "/", nil))
	if w.Code != 200 {
		t.Errorf("without a token: %d", w.Code)
	}
}

func TestAuthorize(t *testing.T) {
	r := httptest.NewRequest("POST", "/", nil)
	Token{}.Authorize(r)
	if r.Header.Get("Authorization") != "" {
		t.Error("the zero Token set a header")
	}
	mustParse(t, secret).Authorize(r)
	if r.Header.Get("Authorization") != "Bearer "+secret {
		t.Errorf("Authorization %q", r.Header.Get("Authorization"))
	}
}

func TestCheckListener(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	tok := mustParse(t, secret)
	any4 := &net.TCPAddr{IP: net.IPv4zero, Port: 8081}
	any6 := &net.TCPAddr{IP: net.IPv6unspecified, Port: 8081}
	node := &net.TCPAddr{IP: net.IPv4(10, 1, 2, 3), Port: 8081}
	for _, tc := range []struct {
		name     string
		addr     net.Addr
		tok      Token
		insecure bool
		refused  bool
	}{
		{name: "loopback", addr: ln.Addr()},
		{name: "IPv6 loopback", addr: &net.TCPAddr{IP: net.IPv6loopback, Port: 1}},
		{name: "all IPv4 interfaces", addr: any4, refused: true},
		{name: "all interfaces", addr: any6, refused: true},
		{name: "a node address", addr: node, refused: true},
		{name: "with a token", addr: any4, tok: tok},
		{name: "opted out", addr: node, insecure: true},
	} {
		err := Agent.CheckListener(tc.addr, tc.tok, tc.insecure)
		if (err != nil) != tc.refused {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if err != nil {
			for _, want := range []string{tc.addr.String(), "--agent-token-file, SLUICE_AGENT_TOKEN_FILE or SLUICE_AGENT_TOKEN", "--insecure-no-auth"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%s: %v lacks %q", tc.name, err, want)
				}
			}
		}
	}
}
