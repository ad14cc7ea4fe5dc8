// Package bearer is Sluice's one implementation of bearer-token
// authentication (RFC 6750) for its HTTP endpoints: `fn serve` (the
// agents send the function token) and `sluice agent` (the trainers send
// the agent token).
//
// A Token never shows itself: it prints, formats and logs as
// "[redacted]"; Reveal is the one way to its value, for the header and a
// child's environment. It is read from a file or an environment variable
// (Source), never from a flag's value, since argv is visible to every
// local user (ps, /proc). Require serves a handler to requests carrying
// the token, compared in constant time (of SHA-256 digests, so that
// neither the content nor the length leaks through timing), and answers
// others 401 with WWW-Authenticate; a few public paths (probes, metrics)
// may stay open to GET. CheckListener is the policy that goes with it: a
// listener beyond loopback needs a token unless the operator opts out
// with --insecure-no-auth.
package bearer
