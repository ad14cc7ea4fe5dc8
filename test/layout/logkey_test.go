package layout

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sluice-project/sluice/internal/testenv"
)

// logErrorKey is a slog call that logs an error under "error" rather than
// "err".
var logErrorKey = regexp.MustCompile(`\.(Debug|Info|Warn|Error)\(.*"error", `)

// TestOneLogKeyForErrors: every log line names its error "err", so that
// one query finds them all.
func TestOneLogKeyForErrors(t *testing.T) {
	root, err := testenv.ModuleRoot()
	if err != nil {
		t.Fatal(err)
	}
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for i, line := range strings.Split(string(data), "\n") {
			if logErrorKey.MatchString(line) {
				rel, _ := filepath.Rel(root, path)
				t.Errorf("%s:%d logs an error under \"error\": use \"err\"", rel, i+1)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
