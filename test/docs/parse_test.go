package docs_test

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// A block is one fenced code block of a page.
type block struct {
	page string // path relative to the repository root
	line int    // the line of its opening fence, from 1
	info string // the fence's info string: sh, text, yaml, ...
	body string // its lines, the fence's indentation taken off

	skip    string // <!-- docs-test: skip REASON -->: not run, for this reason
	skipped bool
	file    string // <!-- docs-test: file NAME -->: written to NAME first
	exit    int    // <!-- docs-test: exit N -->: the exit status expected
}

func (b block) where() string { return fmt.Sprintf("%s:%d", b.page, b.line) }

// The info strings a block may carry: sh is run (or checked), the others
// never are.
var knownInfo = map[string]bool{"sh": true, "text": true, "yaml": true, "json": true, "python": true, "mermaid": true, "go": true}

var markerRE = regexp.MustCompile(`^<!--\s*docs-test:\s*(\S+)\s*(.*?)\s*-->$`)

// parsePage returns a page's fenced blocks and every problem with their
// markers: a block without an info string, an unknown info string, a skip
// without a reason, a marker on no block.
func parsePage(page, text string) ([]block, []string) {
	var blocks []block
	var problems []string
	lines := strings.Split(text, "\n")
	var pending *block // the marker's settings, for the next fence
	pendingLine := 0
	for i := 0; i < len(lines); i++ {
		trimmed := strings.TrimSpace(lines[i])
		if m := markerRE.FindStringSubmatch(trimmed); m != nil {
			if pending != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: a docs-test marker on no block", page, pendingLine))
			}
			pending, pendingLine = &block{}, i+1
			switch m[1] {
			case "skip":
				if m[2] == "" {
					problems = append(problems, fmt.Sprintf("%s:%d: docs-test: skip needs a reason", page, i+1))
				}
				pending.skipped, pending.skip = true, m[2]
			case "file":
				if m[2] == "" || strings.ContainsAny(m[2], "/ ") {
					problems = append(problems, fmt.Sprintf("%s:%d: docs-test: file needs a plain file name, not %q", page, i+1, m[2]))
				}
				pending.file = m[2]
			case "exit":
				n, err := strconv.Atoi(m[2])
				if err != nil || n < 1 || n > 255 {
					problems = append(problems, fmt.Sprintf("%s:%d: docs-test: exit needs a status 1..255, not %q", page, i+1, m[2]))
				}
				pending.exit = n
			default:
				problems = append(problems, fmt.Sprintf("%s:%d: unknown docs-test marker %q (skip, file, exit)", page, i+1, m[1]))
			}
			continue
		}
		if !strings.HasPrefix(trimmed, "```") {
			if trimmed != "" && pending != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: a docs-test marker on no block", page, pendingLine))
				pending = nil
			}
			continue
		}
		indent := lines[i][:len(lines[i])-len(strings.TrimLeft(lines[i], " "))]
		b := block{page: page, line: i + 1, info: strings.TrimSpace(strings.TrimPrefix(trimmed, "```"))}
		if pending != nil {
			b.skip, b.skipped, b.file, b.exit = pending.skip, pending.skipped, pending.file, pending.exit
			pending = nil
		}
		var body []string
		closed := false
		for i++; i < len(lines); i++ {
			if strings.TrimSpace(lines[i]) == "```" {
				closed = true
				break
			}
			body = append(body, strings.TrimPrefix(lines[i], indent))
		}
		if !closed {
			problems = append(problems, fmt.Sprintf("%s: a block that is never closed", b.where()))
		}
		b.body = strings.Join(body, "\n") + "\n"
		switch {
		case b.info == "":
			problems = append(problems, fmt.Sprintf("%s: a block without an info string: say what it is (sh to run, text for output, yaml, ...)", b.where()))
		case !knownInfo[b.info]:
			problems = append(problems, fmt.Sprintf("%s: unknown info string %q (want one of sh, text, yaml, json, python, mermaid, go)", b.where(), b.info))
		case b.info != "sh" && (b.skipped || b.exit != 0):
			problems = append(problems, fmt.Sprintf("%s: skip and exit are for sh blocks, not %s", b.where(), b.info))
		case b.info == "sh" && b.skipped && b.exit != 0:
			problems = append(problems, fmt.Sprintf("%s: a skipped block has no exit status", b.where()))
		}
		blocks = append(blocks, b)
	}
	if pending != nil {
		problems = append(problems, fmt.Sprintf("%s:%d: a docs-test marker on no block", page, pendingLine))
	}
	return blocks, problems
}

// inlineCommandRE finds `sluice ...` in a page's inline code.
var inlineCommandRE = regexp.MustCompile("`(sluice [^`]+)`")

// inlineCommands returns the inline code spans of a page's prose that are
// sluice commands, with their lines.
func inlineCommands(text string) []struct {
	line int
	cmd  string
} {
	var out []struct {
		line int
		cmd  string
	}
	inBlock := false
	for i, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			inBlock = !inBlock
			continue
		}
		if inBlock {
			continue
		}
		for _, m := range inlineCommandRE.FindAllStringSubmatch(l, -1) {
			out = append(out, struct {
				line int
				cmd  string
			}{i + 1, m[1]})
		}
	}
	return out
}

// commandLines splits a shell block into its logical lines (continuations
// joined, comments and blank lines dropped) and each into its simple
// commands (at &&, ||, |, ;, &), each a list of words with quotes taken off.
func commandLines(body string) [][]string {
	var logical []string
	cur := ""
	for _, l := range strings.Split(body, "\n") {
		if strings.HasSuffix(l, "\\") {
			cur += strings.TrimSuffix(l, "\\") + " "
			continue
		}
		logical = append(logical, cur+l)
		cur = ""
	}
	if cur != "" {
		logical = append(logical, cur)
	}
	var out [][]string
	for _, l := range logical {
		words := shellWords(l)
		var simple []string
		for _, w := range words {
			switch w {
			case "&&", "||", "|", ";", "&":
				if len(simple) > 0 {
					out = append(out, simple)
				}
				simple = nil
			default:
				simple = append(simple, w)
			}
		}
		if len(simple) > 0 {
			out = append(out, simple)
		}
	}
	return out
}

// shellWords splits a line into words as a shell would, roughly: quotes
// group and are taken off, a # at a word's start ends the line, the
// operators &&, ||, |, ; and & are words of their own. $(...) is kept whole
// inside its word.
func shellWords(l string) []string {
	var words []string
	var w strings.Builder
	inWord := false
	flush := func() {
		if inWord {
			words = append(words, w.String())
		}
		w.Reset()
		inWord = false
	}
	for i := 0; i < len(l); i++ {
		c := l[i]
		switch {
		case c == '\'' || c == '"':
			j := strings.IndexByte(l[i+1:], c)
			if j < 0 {
				j = len(l) - i - 1
			}
			w.WriteString(l[i+1 : i+1+j])
			inWord = true
			i += j + 1
		case c == '$' && i+1 < len(l) && l[i+1] == '(':
			depth := 0
			j := i + 1
			for ; j < len(l); j++ {
				if l[j] == '(' {
					depth++
				} else if l[j] == ')' {
					depth--
					if depth == 0 {
						break
					}
				}
			}
			w.WriteString(l[i:min(j+1, len(l))])
			inWord = true
			i = j
		case c == ' ' || c == '\t':
			flush()
		case c == '#' && !inWord:
			flush()
			return words
		case c == '&' && (i > 0 && l[i-1] == '>' || i+1 < len(l) && l[i+1] == '>'):
			// 2>&1 and &>FILE are redirections, not operators.
			w.WriteByte(c)
			inWord = true
		case c == '&' || c == '|' || c == ';':
			flush()
			if i+1 < len(l) && (c == '&' || c == '|') && l[i+1] == c {
				words = append(words, string([]byte{c, c}))
				i++
			} else {
				words = append(words, string(c))
			}
		default:
			w.WriteByte(c)
			inWord = true
		}
	}
	flush()
	return words
}
