package docs_test

import (
	"reflect"
	"strings"
	"testing"
)

// TestParseRefusesUnmarkedBlocks: a block must say what it is, a skip
// must give its reason, a marker must stand before a block.
func TestParseRefusesUnmarkedBlocks(t *testing.T) {
	page := strings.Join([]string{
		"# p",
		"```",
		"sluice demo",
		"```",
		"<!-- docs-test: skip -->",
		"```sh",
		"make e2e-knative",
		"```",
		"<!-- docs-test: skip needs root -->",
		"text between",
		"```sh",
		"sluice demo",
		"```",
		"```console",
		"$ x",
		"```",
		"<!-- docs-test: exit 1 -->",
		"```text",
		"out",
		"```",
	}, "\n")
	_, problems := parsePage("p.md", page)
	want := []string{
		"p.md:2: a block without an info string",
		"p.md:5: docs-test: skip needs a reason",
		"p.md:9: a docs-test marker on no block",
		"p.md:14: unknown info string \"console\"",
		"p.md:18: skip and exit are for sh blocks",
	}
	if len(problems) != len(want) {
		t.Fatalf("problems:\n%s\nwant %d", strings.Join(problems, "\n"), len(want))
	}
	for i, w := range want {
		if !strings.HasPrefix(problems[i], w) {
			t.Errorf("problem %d: %q, want it to start %q", i, problems[i], w)
		}
	}
}

// TestParseReadsMarkersAndIndentedBlocks: markers apply to the next block;
// a block in a list item loses its indentation.
func TestParseReadsMarkersAndIndentedBlocks(t *testing.T) {
	page := strings.Join([]string{
		"<!-- docs-test: file job.yaml -->",
		"```yaml",
		"id: j",
		"```",
		"- item:",
		"",
		"  <!-- docs-test: skip two nodes -->",
		"  ```sh",
		"  sluice agent --job j \\",
		"    --ranks 0,1",
		"  ```",
		"<!-- docs-test: exit 1 -->",
		"```sh",
		"sluice fn apply --pipeline bad.yaml",
		"```",
	}, "\n")
	blocks, problems := parsePage("p.md", page)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	got := []block{}
	for _, b := range blocks {
		b.page = ""
		got = append(got, b)
	}
	want := []block{
		{line: 2, info: "yaml", body: "id: j\n", file: "job.yaml"},
		{line: 8, info: "sh", body: "sluice agent --job j \\\n  --ranks 0,1\n", skip: "two nodes", skipped: true},
		{line: 13, info: "sh", body: "sluice fn apply --pipeline bad.yaml\n", exit: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("blocks\n%+v\nwant\n%+v", got, want)
	}
}

func TestCommandLines(t *testing.T) {
	body := `export A=1   # a comment
sluice controller --listen 127.0.0.1:9090 > c.log 2>&1 &
sluice agent --job j \
  --ranks 0,1 && echo "a # b" | wc -l
n=0; while [ "$(curl -s -o /dev/null -w '%{http_code}' http://x/v1/batch)" = 200 ]; do n=$((n+1)); done
`
	got := commandLines(body)
	want := [][]string{
		{"export", "A=1"},
		{"sluice", "controller", "--listen", "127.0.0.1:9090", ">", "c.log", "2>&1"},
		{"sluice", "agent", "--job", "j", "--ranks", "0,1"},
		{"echo", "a # b"},
		{"wc", "-l"},
		{"n=0"},
		{"while", "[", "$(curl -s -o /dev/null -w '%{http_code}' http://x/v1/batch)", "=", "200", "]"},
		{"do", "n=$((n+1))"},
		{"done"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("commandLines\n%q\nwant\n%q", got, want)
	}
}

// TestCheckFindsWhatDoesNotExist: the checks of skipped blocks fail on a
// flag, a command, a test, a make target or a script that is not there.
func TestCheckFindsWhatDoesNotExist(t *testing.T) {
	root := repoRoot(t)
	c, err := newCLI(sluiceBin(t, root))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		body, err string
	}{
		{"sluice agent --job j --ranks 0,1 --team-key-file K\n", ""},
		{"go run ./cmd/sluice demo --json\n", ""},
		{"sluice agent --job j --no-such-flag 1\n", "sluice agent has no flag --no-such-flag"},
		{"SLUICE_X=1 sluice job submit f.yaml --epochs 2 --bogus\n", "sluice job submit has no flag --bogus"},
		{"sluice job frobnicate\n", "sluice job frobnicate: no such command"},
		{"sluice frobnicate --x\n", "sluice frobnicate: no such command"},
		{"go test -run 'TestIntegrationNATSLeastPrivilege' ./deploy/knative\n", ""},
		{"go test -run 'TestIntegrationNATSLeastPrivilege|TestNoSuchThing' ./deploy/knative\n", `no test or benchmark matches "TestNoSuchThing"`},
		{"go test ./no/such/pkg/\n", "go test ./no/such/pkg/: no such package"},
		{"make e2e-knative\n", ""},
		{"make e2e-kubernetes\n", "make e2e-kubernetes: no such target"},
		{"bash test/e2e/cluster/down.sh\n", ""},
		{"bash test/e2e/cluster/gone.sh\n", "no such script"},
	} {
		errs := checkBlock(c, root, tc.body)
		switch {
		case tc.err == "" && len(errs) > 0:
			t.Errorf("%q: %v, want no error", tc.body, errs)
		case tc.err != "" && (len(errs) != 1 || !strings.Contains(errs[0].Error(), tc.err)):
			t.Errorf("%q: %v, want one error containing %q", tc.body, errs, tc.err)
		}
	}
	// In prose a group or a placeholder is not a command.
	for _, s := range []string{"sluice job", "sluice <cmd> -h", "sluice agent --job ID --world-size W --ranks 4,5,6,7", "sluice plan --pipeline P [--dataset URL] --trainer-rate R"} {
		args, _ := sluiceArgs(strings.Fields(s))
		if err := c.checkSluice(args, true); err != nil {
			t.Errorf("inline %q: %v", s, err)
		}
	}
	args, _ := sluiceArgs(strings.Fields("sluice plan --pipeline P [--no-such URL]"))
	if err := c.checkSluice(args, true); err == nil {
		t.Errorf("inline sluice plan --no-such: no error")
	}
}
