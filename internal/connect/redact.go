package connect

import "strings"

// redacted stands for a secret taken out of a URL.
const redacted = "xxxxx"

// RedactURL is raw with the secret of its userinfo replaced: the password
// of user:password@, or all of a lone user@, which NATS reads as a token.
// It works on text that does not parse as a URL too, since that is what a
// refused value looks like. Every URL that reaches an error or a log line
// goes through it.
func RedactURL(raw string) string {
	scheme, rest := "", raw
	if i := strings.Index(raw, "://"); i >= 0 {
		scheme, rest = raw[:i+3], raw[i+3:]
	}
	// The last '@' ends the userinfo: a password may hold '@' or '/'
	// unescaped in a value that is not a valid URL.
	at := strings.LastIndex(rest, "@")
	if at < 0 {
		return raw
	}
	if user, _, ok := strings.Cut(rest[:at], ":"); ok {
		return scheme + user + ":" + redacted + rest[at:]
	}
	return scheme + redacted + rest[at:]
}

// redactURLs is RedactURL of each of urls, comma-joined.
func redactURLs(urls []string) string {
	out := make([]string, len(urls))
	for i, u := range urls {
		out[i] = RedactURL(u)
	}
	return strings.Join(out, ",")
}

// hasUserinfo reports whether any of urls carries credentials.
func hasUserinfo(urls ...string) bool {
	for _, u := range urls {
		if RedactURL(u) != u {
			return true
		}
	}
	return false
}
