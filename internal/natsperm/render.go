package natsperm

import (
	"fmt"
	"strings"
)

// Render is the authorization block of a nats-server configuration with
// a user per role, each with its permissions and the password in the
// server's environment variable PasswordEnv (from a Secret). Subjects are
// quoted: nats-server reads an unquoted $NAME as a variable.
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
	b.WriteString("  ]\n}\n")
	return b.String()
}
