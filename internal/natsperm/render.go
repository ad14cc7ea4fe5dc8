package natsperm

import (
	"fmt"
	"strings"
)

// CalloutIssuerEnv is the environment variable of the NATS server that
// holds the public account nkey of the auth callout's issuer: the
// controller signs each agent's permissions with its seed (a Secret), and
// the server takes no others.
const CalloutIssuerEnv = "SLUICE_NATS_CALLOUT_ISSUER"

// Render is the authorization block of a nats-server configuration with
// a user per role, each with its permissions and the password in the
// server's environment variable PasswordEnv (from a Secret), and the auth
// callout that lets every other user in only as the controllers answer
// (an agent as its job: AgentFor). Subjects are quoted: nats-server reads
// an unquoted $NAME as a variable.
func Render() string {
	var b strings.Builder
	b.WriteString("authorization {\n  users: [\n")
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
