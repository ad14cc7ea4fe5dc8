package bearer

import (
	"crypto/sha256"
	"crypto/subtle"
	"log/slog"
	"net/http"
	"slices"
	"strings"
)

// realm names Sluice in WWW-Authenticate.
const realm = `Bearer realm="sluice"`

// Require serves next to the requests that carry tok (Authorization:
// Bearer TOKEN) and answers the others 401 with WWW-Authenticate, before
// their body is read. GET and HEAD of the public paths are served to
// anyone. A zero tok serves everything (the listener's policy is
// CheckListener's). src names where the token comes from, for the 401's
// message. Refusals are logged at debug level, never with what was sent.
func Require(tok Token, src Source, next http.Handler, logger *slog.Logger, public ...string) http.Handler {
	if !tok.IsSet() {
		return next
	}
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	want := sha256.Sum256([]byte(tok.v))
	public = slices.Clone(public)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if (r.Method == http.MethodGet || r.Method == http.MethodHead) && slices.Contains(public, r.URL.Path) {
			next.ServeHTTP(w, r)
			return
		}
		got, ok := credentials(r.Header)
		if ok {
			sum := sha256.Sum256([]byte(got))
			if subtle.ConstantTimeCompare(sum[:], want[:]) == 1 {
				next.ServeHTTP(w, r)
				return
			}
		}
		challenge, msg := realm, "this endpoint wants a bearer token (Authorization: Bearer TOKEN): give the client the token of "+src.Env
		if ok {
			challenge += `, error="invalid_token"`
			msg = "wrong bearer token: the server's is set by " + src.String()
		}
		logger.Debug("refused a request without the right token", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path, "token_sent", ok)
		w.Header().Set("WWW-Authenticate", challenge)
		// The body may be large and is not read: do not keep the connection.
		w.Header().Set("Connection", "close")
		http.Error(w, msg, http.StatusUnauthorized)
	})
}

// credentials is the token of a request's one Authorization header of
// scheme Bearer (any case).
func credentials(h http.Header) (string, bool) {
	v := h.Values("Authorization")
	if len(v) != 1 {
		return "", false
	}
	scheme, tok, ok := strings.Cut(v[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimLeft(tok, " ")
	return tok, tok != ""
}
