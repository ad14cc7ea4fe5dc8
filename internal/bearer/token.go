package bearer

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net/http"
)

// Length bounds of a token, in bytes.
const (
	MinLength = 16
	MaxLength = 4 << 10
)

// Token is a shared secret. The zero Token is none.
type Token struct{ v string }

// Parse checks s as a token: MinLength..MaxLength bytes of RFC 6750's
// b64token (letters, digits and -._~+/, then = padding), so that it can
// go into a header as it is. The error never quotes s.
func Parse(s string) (Token, error) {
	switch {
	case len(s) < MinLength:
		return Token{}, fmt.Errorf("%d bytes, want at least %d (e.g. `openssl rand -hex 32`)", len(s), MinLength)
	case len(s) > MaxLength:
		return Token{}, fmt.Errorf("%d bytes, want at most %d", len(s), MaxLength)
	}
	pad := false
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '=':
			pad = true
		case pad:
			return Token{}, fmt.Errorf("byte %d: only = may follow =", i+1)
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9',
			c == '-', c == '.', c == '_', c == '~', c == '+', c == '/':
		default:
			return Token{}, fmt.Errorf("byte %d is not a letter, digit or one of -._~+/=", i+1)
		}
	}
	return Token{s}, nil
}

// Random is a new token of 32 random bytes, hex-encoded: what the demo
// gives its own processes.
func Random() (Token, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return Token{}, fmt.Errorf("generating a token: %w", err)
	}
	return Token{hex.EncodeToString(b[:])}, nil
}

// IsSet says whether t is a token, not the zero Token.
func (t Token) IsSet() bool { return t.v != "" }

// Reveal is the token's value: for an Authorization header or a child's
// environment, nowhere else.
func (t Token) Reveal() string { return t.v }

// Authorize sets r's Authorization header to t; a zero t leaves r alone.
func (t Token) Authorize(r *http.Request) {
	if t.IsSet() {
		r.Header.Set("Authorization", "Bearer "+t.v)
	}
}

// Env is "name=token", for a child process's environment.
func (t Token) Env(name string) string { return name + "=" + t.v }

const redacted = "[redacted]"

func (t Token) String() string {
	if !t.IsSet() {
		return "[none]"
	}
	return redacted
}

// GoString keeps %#v from printing the value.
func (t Token) GoString() string { return "bearer.Token(" + t.String() + ")" }

// LogValue keeps slog from printing the value.
func (t Token) LogValue() slog.Value { return slog.StringValue(t.String()) }

// MarshalText keeps encoders (JSON, YAML) from writing the value.
func (t Token) MarshalText() ([]byte, error) { return []byte(t.String()), nil }
