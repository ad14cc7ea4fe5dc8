package docs_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
)

// cli knows the commands of a sluice binary and their flags, from its own
// help.
type cli struct {
	bin      string
	commands map[string]bool // "agent", "job submit", ...
	groups   map[string]bool // "job", "fn", ...: the first word of two-word commands

	mu    sync.Mutex
	flags map[string]map[string]bool // command: its flags, without dashes
}

// commandLineRE finds a command in sluice -h whose name leaves two spaces
// before its description: that gives the description's column, and every
// line's name is what stands before it (a long name leaves one space).
var commandLineRE = regexp.MustCompile(`^  ([a-z][a-z-]*(?: [a-z][a-z-]*)?) {2,}\S`)

func newCLI(bin string) (*cli, error) {
	out, _ := exec.Command(bin, "-h").CombinedOutput() // -h exits 0 or 2: the text is what counts
	c := &cli{bin: bin, commands: map[string]bool{}, groups: map[string]bool{}, flags: map[string]map[string]bool{}}
	lines := strings.Split(string(out), "\n")
	col := 0
	for _, l := range lines {
		if m := commandLineRE.FindStringSubmatchIndex(l); m != nil {
			col = m[1] - 1
			break
		}
	}
	for _, l := range lines {
		if col == 0 || len(l) <= col || !strings.HasPrefix(l, "  ") || l[2] == ' ' {
			continue
		}
		name := strings.TrimSpace(l[:col])
		if !regexp.MustCompile(`^[a-z][a-z-]*( [a-z][a-z-]*)?$`).MatchString(name) {
			continue
		}
		c.commands[name] = true
		if g, _, ok := strings.Cut(name, " "); ok {
			c.groups[g] = true
		}
	}
	if len(c.commands) < 10 || !c.commands["nats callout-key"] {
		return nil, fmt.Errorf("sluice -h lists %d commands, want the usual list (nats callout-key among them):\n%s", len(c.commands), out)
	}
	return c, nil
}

var flagLineRE = regexp.MustCompile(`^\s+-([A-Za-z0-9][A-Za-z0-9-]*)`)

// flagsOf returns a command's flags as its -h lists them.
func (c *cli) flagsOf(cmd string) (map[string]bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f, ok := c.flags[cmd]; ok {
		return f, nil
	}
	out, _ := exec.Command(c.bin, append(strings.Fields(cmd), "-h")...).CombinedOutput()
	f := map[string]bool{"h": true, "help": true}
	for _, l := range strings.Split(string(out), "\n") {
		if m := flagLineRE.FindStringSubmatch(l); m != nil {
			f[m[1]] = true
		}
	}
	if len(f) == 2 && !strings.Contains(string(out), "Usage") {
		return nil, fmt.Errorf("sluice %s -h printed no usage:\n%s", cmd, out)
	}
	c.flags[cmd] = f
	return f, nil
}

// sluiceArgs returns the arguments after the program when words run
// sluice (sluice, ./sluice, bin/sluice, go run ./cmd/sluice), with leading
// VAR=value words skipped.
func sluiceArgs(words []string) ([]string, bool) {
	for len(words) > 0 && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(words[0]) {
		words = words[1:]
	}
	if len(words) == 0 {
		return nil, false
	}
	if words[0] == "go" && len(words) >= 3 && words[1] == "run" && strings.TrimSuffix(words[2], "/") == "./cmd/sluice" {
		return words[3:], true
	}
	if filepath.Base(words[0]) == "sluice" {
		return words[1:], true
	}
	return nil, false
}

// checkSluice checks one sluice command line: its command exists and every
// flag it uses does. A bare group (`sluice job`) passes when lenient, as
// prose names groups.
func (c *cli) checkSluice(args []string, lenient bool) error {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		return nil // sluice -h, sluice alone
	}
	cmd := ""
	switch {
	case len(args) >= 2 && c.commands[args[0]+" "+args[1]]:
		cmd, args = args[0]+" "+args[1], args[2:]
	case c.commands[args[0]]:
		cmd, args = args[0], args[1:]
	case c.groups[args[0]]:
		if len(args) >= 2 && !lenient {
			return fmt.Errorf("sluice %s %s: no such command (sluice -h lists them)", args[0], args[1])
		}
		return nil
	case lenient && !regexp.MustCompile(`^[a-z]+$`).MatchString(args[0]):
		return nil // `sluice <cmd>`, `sluice ...`: prose, not a command
	default:
		return fmt.Errorf("sluice %s: no such command (sluice -h lists them)", args[0])
	}
	var used []string
	for _, a := range args {
		a = strings.TrimLeft(a, "[(")
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" || strings.ContainsAny(a, "*") {
			continue
		}
		name := strings.TrimLeft(a, "-")
		name, _, _ = strings.Cut(name, "=")
		name = strings.TrimRight(name, "]),.:;")
		if name == "" || !regexp.MustCompile(`^[A-Za-z]`).MatchString(name) {
			continue // -1 as a value
		}
		used = append(used, name)
	}
	if len(used) == 0 {
		return nil // nothing to check: `sluice version` has no -h
	}
	flags, err := c.flagsOf(cmd)
	if err != nil {
		return err
	}
	var unknown []string
	for _, name := range used {
		if !flags[name] {
			unknown = append(unknown, "--"+name)
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("sluice %s has no flag %s (sluice %s -h)", cmd, strings.Join(unknown, ", "), cmd)
	}
	return nil
}

var testFuncRE = regexp.MustCompile(`(?m)^func ((?:Test|Benchmark|Example|Fuzz)\w*)\(`)

// checkGoTest checks `go test [-run X] [-bench Y] ./pkg/...`: each package
// exists, and each name of a -run or -bench alternation names a test or
// benchmark there.
func checkGoTest(root string, words []string) error {
	var pkgs, patterns []string
	for i := 2; i < len(words); i++ {
		w := words[i]
		switch {
		case (w == "-run" || w == "-bench") && i+1 < len(words):
			patterns = append(patterns, words[i+1])
			i++
		case strings.HasPrefix(w, "-run=") || strings.HasPrefix(w, "-bench="):
			_, p, _ := strings.Cut(w, "=")
			patterns = append(patterns, p)
		case strings.HasPrefix(w, "./"):
			pkgs = append(pkgs, w)
		}
	}
	var names []string
	for _, p := range pkgs {
		if strings.HasSuffix(p, "/...") {
			continue
		}
		dir := filepath.Join(root, p)
		files, err := filepath.Glob(filepath.Join(dir, "*_test.go"))
		if err != nil || len(files) == 0 {
			return fmt.Errorf("go test %s: no such package with tests", p)
		}
		for _, f := range files {
			src, err := os.ReadFile(f)
			if err != nil {
				return err
			}
			for _, m := range testFuncRE.FindAllStringSubmatch(string(src), -1) {
				names = append(names, m[1])
			}
		}
	}
	if len(names) == 0 {
		return nil
	}
	for _, pat := range patterns {
		top, _, _ := strings.Cut(pat, "/")
		if top == "" || top == "^$" || top == "XXX" || top == "." {
			continue
		}
		for _, alt := range strings.Split(top, "|") {
			re, err := regexp.Compile(alt)
			if err != nil {
				return fmt.Errorf("go test -run %q: %v", pat, err)
			}
			found := false
			for _, n := range names {
				if re.MatchString(n) {
					found = true
					break
				}
			}
			if !found {
				return fmt.Errorf("go test %s: no test or benchmark matches %q", strings.Join(pkgs, " "), alt)
			}
		}
	}
	return nil
}

// checkMake checks `make TARGET...` against the Makefile's targets.
func checkMake(root string, words []string) error {
	src, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		return err
	}
	for _, t := range words[1:] {
		if strings.Contains(t, "=") || strings.HasPrefix(t, "-") {
			continue
		}
		if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(t) + `:`).Match(src) {
			return fmt.Errorf("make %s: no such target in the Makefile", t)
		}
	}
	return nil
}

// checkBlock checks every command of a block that is not run.
func checkBlock(c *cli, root, body string) []error {
	var errs []error
	for _, words := range commandLines(body) {
		if args, ok := sluiceArgs(words); ok {
			if err := c.checkSluice(args, false); err != nil {
				errs = append(errs, err)
			}
			continue
		}
		for len(words) > 0 && regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`).MatchString(words[0]) {
			words = words[1:]
		}
		switch {
		case len(words) >= 2 && words[0] == "go" && words[1] == "test":
			if err := checkGoTest(root, words); err != nil {
				errs = append(errs, err)
			}
		case len(words) >= 1 && words[0] == "make":
			if err := checkMake(root, words); err != nil {
				errs = append(errs, err)
			}
		case len(words) >= 2 && words[0] == "bash" && strings.HasSuffix(words[1], ".sh"):
			if _, err := os.Stat(filepath.Join(root, words[1])); err != nil {
				errs = append(errs, fmt.Errorf("bash %s: no such script", words[1]))
			}
		}
	}
	return errs
}
