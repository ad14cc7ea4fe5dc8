package main

import (
	"strings"
	"testing"
)

// TestCommandGroupsListTheirCommands: the first word of multi-word
// commands ("sluice fn", "sluice bench", "sluice job") lists the commands
// it starts instead of saying "unknown command".
func TestCommandGroupsListTheirCommands(t *testing.T) {
	cmds := commands()
	groups := map[string][]string{}
	for name := range cmds {
		if first, _, ok := strings.Cut(name, " "); ok {
			groups[first] = append(groups[first], name)
		}
	}
	if len(groups["fn"]) != 2 {
		t.Fatalf("fn commands %v, want fn serve and fn apply", groups["fn"])
	}
	for first, names := range groups {
		for _, args := range [][]string{{first}, {first, "-h"}, {first, "help"}} {
			code, stdout, stderr := runCLI(t, args...)
			if code != 0 || stderr != "" || !strings.Contains(stdout, "Usage: sluice "+first+" <command>") {
				t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, stdout, stderr)
			}
			for name := range cmds {
				if listed := strings.Contains(stdout, "  "+name+" "); listed != strings.HasPrefix(name, first+" ") {
					t.Errorf("%v: %s listed %v:\n%s", args, name, listed, stdout)
				}
			}
		}
		code, _, stderr := runCLI(t, first, "nosuch")
		if code != 2 || !strings.Contains(stderr, `unknown command "`+first+` nosuch"`) || !strings.Contains(stderr, "  "+names[0]+" ") {
			t.Errorf("%s nosuch: exit %d, stderr %q", first, code, stderr)
		}
	}
}
