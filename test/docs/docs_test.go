// Package docs_test runs the docs: every shell block of README.md,
// docs/*.md and the tree's other markdown pages is run as written (or, marked as not runnable here with a
// reason, checked against the binary's own help), so that the docs cannot
// drift from the binary. docs/development.md, "The docs test", says how a
// block is marked.
package docs_test

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sluice-project/sluice/internal/testenv"
	"github.com/sluice-project/sluice/synth"
)

// blockTimeout bounds one block; the longest, the README's demo, takes
// about 15 s on two quiet cores and 40 s on busy ones.
const blockTimeout = 4 * time.Minute

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// pages are the README, docs/*.md and the other markdown pages of the
// tree (deploy/knative/README.md, ...), relative to the root, the README
// first.
func pages(t *testing.T, root string) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() && path != root && (strings.HasPrefix(name, ".") || name == "testdata" || name == "node_modules" || name == "bin") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(name, ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			out = append(out, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] == "README.md" || out[j] != "README.md" && out[i] < out[j] })
	if len(out) == 0 || out[0] != "README.md" {
		t.Fatalf("no README.md at %s", root)
	}
	return out
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// sluiceBin builds sluice once for the whole test binary, as a user would
// (go build ./cmd/sluice), into a directory the blocks get first on PATH.
func sluiceBin(t *testing.T, root string) string {
	t.Helper()
	buildOnce.Do(func() {
		binDir, buildErr = os.MkdirTemp("", "sluice-docs-bin-")
		if buildErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, "sluice"), "./cmd/sluice")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build ./cmd/sluice: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "sluice")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		os.RemoveAll(binDir)
	}
	os.Exit(code)
}

type page struct {
	path   string
	text   string
	blocks []block
}

func readPages(t *testing.T, root string) []page {
	t.Helper()
	var out []page
	for _, p := range pages(t, root) {
		src, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			t.Fatal(err)
		}
		blocks, problems := parsePage(p, string(src))
		for _, pr := range problems {
			t.Error(pr)
		}
		out = append(out, page{path: p, text: string(src), blocks: blocks})
	}
	return out
}

// TestDocsCommands runs every shell block not marked skip, page by page,
// and checks the rest: each skipped block's commands and each sluice
// command in inline code against the binary, each relative link against
// the tree.
func TestDocsCommands(t *testing.T) {
	root := repoRoot(t)
	ps := readPages(t, root)
	bin := sluiceBin(t, root)
	c, err := newCLI(bin)
	if err != nil {
		t.Fatal(err)
	}
	run, skipped := 0, 0
	for _, p := range ps {
		for _, ic := range inlineCommands(p.text) {
			args, _ := sluiceArgs(strings.Fields(ic.cmd))
			if err := c.checkSluice(args, true); err != nil {
				t.Errorf("%s:%d: `%s`: %v", p.path, ic.line, ic.cmd, err)
			}
		}
		for _, b := range p.blocks {
			if b.info != "sh" {
				continue
			}
			if b.skipped {
				skipped++
				for _, err := range checkBlock(c, root, b.body) {
					t.Errorf("%s (skipped: %s): %v", b.where(), b.skip, err)
				}
			} else {
				run++
			}
		}
		checkLinks(t, root, p)
	}
	t.Logf("%d shell blocks to run, %d skipped with a reason and checked", run, skipped)
	if testing.Short() {
		t.Log("-short: the blocks are checked, not run")
		return
	}
	for _, p := range ps {
		if !hasRunBlock(p) {
			continue
		}
		// Pages run side by side (the README's demo waits on its simulated
		// GPU most of the time); no two pages' blocks listen on one port.
		t.Run(strings.ReplaceAll(p.path, "/", "_"), func(t *testing.T) {
			t.Parallel()
			runPage(t, root, filepath.Dir(bin), p)
		})
	}
}

// TestREADMEIsShort keeps the README what a newcomer reads in ten
// minutes; the rest belongs in docs/.
func TestREADMEIsShort(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), "\n"); n > 250 {
		t.Errorf("README.md has %d lines, want at most 250: move the details to a page of docs/ (docs/README.md lists them)", n)
	}
}

// TestIndexListsEveryPage: docs/README.md links every page of docs/.
func TestIndexListsEveryPage(t *testing.T) {
	root := repoRoot(t)
	index, err := os.ReadFile(filepath.Join(root, "docs", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pages(t, root) {
		name := filepath.Base(p)
		if !strings.HasPrefix(p, "docs/") || name == "README.md" {
			continue
		}
		if !strings.Contains(string(index), "]("+name+")") {
			t.Errorf("docs/README.md does not link %s", p)
		}
	}
}

func hasRunBlock(p page) bool {
	for _, b := range p.blocks {
		if b.info == "sh" && !b.skipped {
			return true
		}
	}
	return false
}

var linkRE = regexp.MustCompile(`\]\(([^)\s#]+)(#[^)\s]*)?\)`)

// checkLinks checks that every relative link of a page names a file.
func checkLinks(t *testing.T, root string, p page) {
	t.Helper()
	for i, l := range strings.Split(p.text, "\n") {
		for _, m := range linkRE.FindAllStringSubmatch(l, -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			rel := filepath.Clean(filepath.Join(filepath.Dir(p.path), target))
			if _, err := os.Stat(filepath.Join(root, rel)); err == nil {
				continue
			}
			t.Errorf("%s:%d: link to %s: no such file", p.path, i+1, rel)
		}
	}
}

// runPage runs a page's blocks in order in a directory of its own, with an
// embedded NATS JetStream server and S3 endpoint on loopback holding a
// small image dataset at s3://datasets/flowers/train/.
func runPage(t *testing.T, root, binDir string, p page) {
	dir := t.TempDir()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		// The repository's entries, so that relative paths work; not its
		// hidden ones nor bin/, where a block may build.
		if strings.HasPrefix(e.Name(), ".") || e.Name() == "bin" {
			continue
		}
		if err := os.Symlink(filepath.Join(root, e.Name()), filepath.Join(dir, e.Name())); err != nil {
			t.Fatal(err)
		}
	}
	natsSrv, _ := testenv.NATS(t)
	s3c, s3cfg := testenv.S3(t, "datasets")
	imgs, err := synth.Images(synth.ImageOptions{Samples: 192, Shards: 6, Seed: 1, MinSide: 32, MaxSide: 64, Quality: 70, Classes: 4})
	if err != nil {
		t.Fatal(err)
	}
	if err := synth.Upload(context.Background(), s3c, "datasets", "flowers/train/", imgs); err != nil {
		t.Fatal(err)
	}
	env := []string{"HOME=" + dir, "PATH=" + binDir + string(os.PathListSeparator) + os.Getenv("PATH"),
		"SLUICE_NATS_URL=" + natsSrv.URL(), "SLUICE_S3_ENDPOINT=" + s3cfg.Endpoint, "AWS_REGION=us-east-1"}
	env = append(env, testenv.S3Env()...)
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if k == "HOME" || k == "PATH" || k == "XDG_CONFIG_HOME" || strings.HasPrefix(k, "SLUICE_") || strings.HasPrefix(k, "AWS_") {
			continue
		}
		env = append(env, kv)
	}
	for _, b := range p.blocks {
		if b.file != "" {
			if err := os.WriteFile(filepath.Join(dir, b.file), []byte(b.body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if b.info != "sh" || b.skipped {
			continue
		}
		runBlock(t, dir, env, b)
	}
}

// runBlock runs one block with bash -e in its own process group, which is
// stopped when the page's test ends (what the block left in the
// background goes with it).
func runBlock(t *testing.T, dir string, env []string, b block) {
	t.Helper()
	// go run ./cmd/sluice is the binary built for the test.
	script := strings.ReplaceAll(b.body, "go run ./cmd/sluice", "sluice")
	out, err := os.CreateTemp(t.TempDir(), "out")
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	cmd := exec.Command("bash", "-e", "-o", "pipefail", "-c", script)
	cmd.Dir, cmd.Env, cmd.Stdout, cmd.Stderr = dir, env, out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pgid := cmd.Process.Pid
	t.Cleanup(func() { stopGroup(pgid) })
	timer := time.AfterFunc(blockTimeout, func() { syscall.Kill(-pgid, syscall.SIGKILL) })
	err = cmd.Wait()
	timer.Stop()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("%s: %v", b.where(), err)
	}
	elapsed := time.Since(start)
	if code != b.exit {
		text, _ := os.ReadFile(out.Name())
		t.Errorf("%s: exit status %d after %.1fs, want %d:\n%s\noutput (last 4 KiB):\n%s", b.where(), code, elapsed.Seconds(), b.exit, b.body, tail(text, 4096))
		return
	}
	if testing.Verbose() {
		text, _ := os.ReadFile(out.Name())
		t.Logf("%s: ran in %.1fs; output (last 2 KiB):\n%s", b.where(), elapsed.Seconds(), tail(text, 2048))
		return
	}
	t.Logf("%s: ran in %.1fs", b.where(), elapsed.Seconds())
}

// stopGroup sends a process group SIGTERM, waits up to 10 s for it to go,
// then kills what is left.
func stopGroup(pgid int) {
	if syscall.Kill(-pgid, syscall.SIGTERM) != nil {
		return
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if syscall.Kill(-pgid, 0) != nil {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
