package bearer

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
)

// Source is where a command reads one token: the file its flag names,
// else the file $ENV_FILE names, else $ENV itself. A token is never a
// flag's value: argv is visible to every local user.
type Source struct {
	Flag string // the file flag, without dashes
	Env  string // the variable that holds the token; Env+"_FILE" names a file
}

// The tokens of Sluice's endpoints.
var (
	// Function is what `fn serve` requires and the agents send.
	Function = Source{Flag: "fn-token-file", Env: "SLUICE_FN_TOKEN"}
	// Agent is what `sluice agent`'s API requires and the trainers send.
	Agent = Source{Flag: "agent-token-file", Env: "SLUICE_AGENT_TOKEN"}
)

// FileEnv is the variable that names a token file.
func (s Source) FileEnv() string { return s.Env + "_FILE" }

// String names the ways to give the token, for messages.
func (s Source) String() string {
	return fmt.Sprintf("--%s, %s or %s", s.Flag, s.FileEnv(), s.Env)
}

// Load reads the token from the file at path (the flag's value), else
// from the file $ENV_FILE names, else from $ENV; the zero Token when none
// is given. A file's surrounding white space (its final newline) is not
// part of the token. Errors name the source, never the value.
func (s Source) Load(path string, getenv func(string) string) (Token, error) {
	where := "--" + s.Flag
	if path == "" {
		path, where = getenv(s.FileEnv()), s.FileEnv()
	}
	if path != "" {
		v, err := readToken(path)
		if err != nil {
			return Token{}, fmt.Errorf("%s %s: %w", where, path, err)
		}
		t, err := Parse(v)
		if err != nil {
			return Token{}, fmt.Errorf("%s %s: the token: %w", where, path, err)
		}
		return t, nil
	}
	v := getenv(s.Env)
	if v == "" {
		return Token{}, nil
	}
	t, err := Parse(strings.TrimSpace(v))
	if err != nil {
		return Token{}, fmt.Errorf("%s: %w", s.Env, err)
	}
	return t, nil
}

// readToken reads a token file, bounded.
func readToken(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("reading the token: %w", err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxLength+1024))
	if err != nil {
		return "", fmt.Errorf("reading the token: %w", err)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return "", fmt.Errorf("empty")
	}
	return v, nil
}

// Flag is a Source registered on a flag set.
type Flag struct {
	Source
	path *string
}

// Register adds s's file flag to fs; usage says what the token is for.
func (s Source) Register(fs *flag.FlagSet, usage string) *Flag {
	return &Flag{Source: s, path: fs.String(s.Flag, "", usage+
		" (a `FILE` holding it; or "+s.FileEnv()+" names the file, or "+s.Env+" holds the token)")}
}

// Load reads the token as the flag and the environment say.
func (f *Flag) Load() (Token, error) { return f.Source.Load(*f.path, os.Getenv) }

// InsecureFlag is the flag by which an operator serves beyond loopback
// without a token, knowingly.
const InsecureFlag = "insecure-no-auth"

// RegisterInsecure adds InsecureFlag to fs.
func RegisterInsecure(fs *flag.FlagSet) *bool {
	return fs.Bool(InsecureFlag, false,
		"serve without a token on an address beyond loopback: anyone who reaches it may use it (default: refuse to start)")
}

// CheckListener says why a listener at addr may not serve without a
// token: nil when tok is set, when addr is on loopback (only this
// machine reaches it), or when insecure (the operator's opt-out).
func (s Source) CheckListener(addr net.Addr, tok Token, insecure bool) error {
	if tok.IsSet() || insecure || isLoopback(addr) {
		return nil
	}
	where := addr.String()
	if a, ok := addr.(*net.TCPAddr); ok && (a.IP == nil || a.IP.IsUnspecified()) {
		where += " (every interface)"
	}
	return fmt.Errorf("listening on %s, beyond loopback, without a token: give one with %s "+
		"(e.g. `openssl rand -hex 32` into a file), listen on 127.0.0.1, or pass --%s to serve anyone who reaches it",
		where, s, InsecureFlag)
}

func isLoopback(addr net.Addr) bool {
	switch a := addr.(type) {
	case *net.TCPAddr:
		return a.IP.IsLoopback()
	case *net.UnixAddr:
		return true // a file: its permissions decide
	}
	return false
}
