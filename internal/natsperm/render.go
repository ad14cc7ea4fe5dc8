package natsperm

import (
	"fmt"
	"strings"
	"time"
)

// CalloutIssuerEnv is the environment variable of the NATS server that
// holds the public account nkey of the auth callout's issuer: the
// controller signs each agent's permissions with its seed (a Secret), and
// the server takes no others.
const CalloutIssuerEnv = "SLUICE_NATS_CALLOUT_ISSUER"

// CalloutWait is how long the NATS server waits for the controllers'
// answer to an auth callout before it refuses the connection: its auth
// timeout, written out so that the shipped configurations, the embedded
// server and the controller's lookup bound agree. It is nats-server's
// default and cannot usefully be longer: the server sends its first PING
// 2 to 2.4 s after a client's CONNECT even while the callout is pending,
// and nats.go then fails the handshake ("expected 'PONG', got 'PING'").
// The server tells the client no more than "Authorization Violation" for
// a late answer and a refusal alike, so a callout-authenticated client
// retries a refusal that came late (internal/connect, NATS.RetryAuth).
const CalloutWait = 2 * time.Second

// Render is the authorization block of a nats-server configuration with
// a user per role, each with its permissions and the password in the
// server's environment variable PasswordEnv (from a Secret), and the auth
// callout that lets every other user in only as the controllers answer
// (an agent as its job: AgentFor), waited for CalloutWait. Subjects are quoted: nats-server reads
// an unquoted $NAME as a variable.
func Render() string {
	var b strings.Builder
	fmt.Fprintf(&b, "authorization {\n  timeout: %g\n  users: [\n", CalloutWait.Seconds())
	for _, r := range Roles() {
		fmt.Fprintf(&b, "    {\n      user: %s\n      password: $%s\n      permissions: {\n", r.User(), r.PasswordEnv())
		list := func(name string, subjects []string) {
			fmt.Fprintf(&b, "        %s: {allow: [\n", name)
			for _, s := range subjects {
				fmt.Fprintf(&b, "          %q\n", s)
			}
			b.WriteString("        ]}\n")
		}
		list("publish", r.Publish)
		list("subscribe", r.Subscribe)
		b.WriteString("      }\n    }\n")
	}
	b.WriteString("  ]\n")
	// Every user not in auth_users (an agent's, or a name nobody has) is
	// asked of the controllers; the static users are checked here alone.
	fmt.Fprintf(&b, "  auth_callout {\n    issuer: $%s\n    auth_users: [", CalloutIssuerEnv)
	for i, r := range Roles() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(r.User())
	}
	b.WriteString("]\n  }\n}\n")
	return b.String()
}
