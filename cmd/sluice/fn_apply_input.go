package main

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/sluice-project/sluice/format/lines"
	"github.com/sluice-project/sluice/format/wds"
)

// acceptedInputs says what --input takes, for its flag and its errors.
const acceptedInputs = "a sample file (image, .txt, .json), a .jsonl or .tsv file (one sample a line), a .tar shard, " +
	"a directory of such files (KEY.jpg + KEY.cls make one sample), or an ImageFolder directory (one subfolder of images per class)"

// imageFolderExts are the files torchvision's ImageFolder takes as
// samples (IMG_EXTENSIONS, matched case-insensitively); the others are
// skipped, as there.
var imageFolderExts = []string{"jpg", "jpeg", "png", "ppm", "bmp", "pgm", "tif", "tiff", "webp"}

// inputWalker reads `fn apply`'s --input as samples.
type inputWalker struct {
	maxMember int64
	// tarLimits bound each sample of a tar shard.
	tarLimits wds.Limits
	// fn gets every sample; its error stops the walk and is returned.
	fn func(wds.Sample) error
	// fail gets the samples that cannot be read.
	fail func(key, reason string)
	// note gets remarks on what was left out.
	note func(msg string)
}

// walk calls fn with every sample of path, in a stable order: a tar
// shard's in its order; the lines of a .jsonl or .tsv file keyed as a
// line shard's are; a directory's by file name, files sharing a name up
// to the extension making one sample (a.jpg + a.cls). A directory with
// subfolders, other than hidden ones alone, is an ImageFolder (see
// imageFolder).
func (w inputWalker) walk(path string) error {
	info, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("--input: %w", err)
	}
	if !info.IsDir() {
		return w.file(path, filepath.Base(path))
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return fmt.Errorf("reading input directory: %w", err)
	}
	var classes, files []string
	for _, e := range entries {
		switch kind := entryKind(path, e); {
		case kind.IsDir():
			classes = append(classes, e.Name())
		case kind.IsRegular() && !strings.HasPrefix(e.Name(), "."):
			files = append(files, e.Name())
		}
	}
	// Hidden folders alone (.git, .ipynb_checkpoints beside a folder of
	// images) do not make an ImageFolder; beside class folders they are
	// classes, as ImageFolder counts them.
	if slices.ContainsFunc(classes, func(c string) bool { return !strings.HasPrefix(c, ".") }) {
		if len(files) > 0 {
			w.note(fmt.Sprintf("ignoring %d files beside the class folders of %s (%s), as ImageFolder does", len(files), path, clipList(files, 3)))
		}
		return w.imageFolder(path, classes)
	}
	return w.flat(path, files)
}

// entryKind is e's type, following a symbolic link (ImageFolder's
// os.scandir is_dir() does too).
func entryKind(dir string, e fs.DirEntry) fs.FileMode {
	if e.Type()&fs.ModeSymlink == 0 {
		return e.Type()
	}
	info, err := os.Stat(filepath.Join(dir, e.Name()))
	if err != nil {
		return e.Type()
	}
	return info.Mode().Type()
}

// flat reads a directory of sample files.
func (w inputWalker) flat(dir string, names []string) error {
	// Group plain files by key; line and tar files are samples of their own.
	type group struct {
		key   string
		files []string // names in the directory
	}
	var groups []*group
	byKey := map[string]*group{}
	for _, name := range names {
		key, ext := splitExt(name)
		if isContainer(ext) {
			groups = append(groups, &group{key: name, files: []string{name}})
			continue
		}
		g := byKey[key]
		if g == nil {
			g = &group{key: key}
			byKey[key] = g
			groups = append(groups, g)
		}
		g.files = append(g.files, name)
	}
	slices.SortStableFunc(groups, func(a, b *group) int { return strings.Compare(a.key, b.key) })
	for _, g := range groups {
		if _, ext := splitExt(g.files[0]); isContainer(ext) {
			if err := w.file(filepath.Join(dir, g.files[0]), g.files[0]); err != nil {
				return err
			}
			continue
		}
		s := wds.Sample{Key: g.key, Files: map[string][]byte{}}
		bad := ""
		for _, name := range g.files {
			_, ext := splitExt(name)
			data, err := readCapped(filepath.Join(dir, name), w.maxMember)
			if err != nil {
				bad = err.Error()
				break
			}
			if _, dup := s.Files[ext]; dup {
				bad = fmt.Sprintf("two files with member %s (names differ only in case)", ext)
				break
			}
			s.Files[ext] = data
		}
		if bad != "" {
			w.fail(g.key, bad)
			continue
		}
		if err := w.fn(s); err != nil {
			return err
		}
	}
	return nil
}

// imageFolder reads torchvision's ImageFolder layout: root/CLASS/**/IMAGE.
// Classes are numbered as torchvision's find_classes does, by the folder
// names sorted by code point (Python's sorted(); Go's string order is the
// same for UTF-8) and including every subfolder, hidden ones too. Each
// image is a sample keyed CLASS/PATH-WITHOUT-EXTENSION holding the image
// and a "cls" member with the class index, which the built-in image
// pipelines read as the label. Files that are not images are skipped.
func (w inputWalker) imageFolder(root string, classes []string) error {
	slices.Sort(classes)
	var empty []string
	skipped := 0
	for idx, class := range classes {
		if strings.HasPrefix(class, ".") {
			w.note(fmt.Sprintf("class folder %s is hidden but counted, as ImageFolder counts it: it is class %d", class, idx))
		}
		// The class folder itself may be a symbolic link (ImageFolder
		// follows links); WalkDir does not follow its root's.
		dir, err := filepath.EvalSymlinks(filepath.Join(root, class))
		if err != nil {
			return fmt.Errorf("reading class folder %s: %w", class, err)
		}
		var images []string // slash-separated, relative to the class folder
		err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				return nil
			}
			if _, ext := splitExt(d.Name()); !slices.Contains(imageFolderExts, ext) {
				skipped++
				return nil
			}
			rel, err := filepath.Rel(dir, p)
			if err != nil {
				return err
			}
			images = append(images, filepath.ToSlash(rel))
			return nil
		})
		if err != nil {
			return fmt.Errorf("reading class folder %s: %w", class, err)
		}
		if len(images) == 0 {
			empty = append(empty, class)
		}
		slices.Sort(images)
		seen := map[string]string{}
		for _, rel := range images {
			stem, ext := splitExt(rel)
			key := class + "/" + stem
			if other, dup := seen[key]; dup {
				w.fail(key, fmt.Sprintf("two images %s and %s have one key", other, rel))
				continue
			}
			seen[key] = rel
			data, err := readCapped(filepath.Join(dir, filepath.FromSlash(rel)), w.maxMember)
			if err != nil {
				w.fail(key, err.Error())
				continue
			}
			s := wds.Sample{Key: key, Files: map[string][]byte{ext: data, "cls": []byte(strconv.Itoa(idx))}}
			if err := w.fn(s); err != nil {
				return err
			}
		}
	}
	if skipped > 0 {
		w.note(fmt.Sprintf("skipped %d files under the class folders that are not images (%s)", skipped, strings.Join(imageFolderExts, ", ")))
	}
	if len(empty) > 0 && len(empty) < len(classes) {
		w.note(fmt.Sprintf("class folders with no image (their numbers are kept): %s", clipList(empty, 5)))
	}
	return nil
}

// file reads one file: a tar shard, a line file, or one sample.
func (w inputWalker) file(path, name string) error {
	key, ext := splitExt(name)
	if !isContainer(ext) {
		data, err := readCapped(path, w.maxMember)
		if err != nil {
			w.fail(key, err.Error())
			return nil
		}
		return w.fn(wds.Sample{Key: key, Files: map[string][]byte{ext: data}})
	}
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("opening input: %w", err)
	}
	defer f.Close()
	next := wds.NewLimitedReader(f, w.tarLimits).Next
	if ext != "tar" {
		next = lines.NewReader(f, name, ext, int(w.maxMember)).Next
	}
	for {
		s, err := next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		var se *wds.SampleError
		if errors.As(err, &se) {
			w.fail(se.Key, se.Reason)
			continue
		}
		if err != nil {
			return fmt.Errorf("reading %s: %w", path, err)
		}
		if err := w.fn(s); err != nil {
			return err
		}
	}
}

// splitExt splits a file name at its last dot; the extension, lowercased,
// names the member ("photo.JPG" is member jpg of sample "photo").
func splitExt(name string) (key, ext string) {
	i := strings.LastIndexByte(name, '.')
	if i <= 0 || strings.LastIndexByte(name, '/') > i {
		return name, ""
	}
	return name[:i], strings.ToLower(name[i+1:])
}

// isContainer reports whether files with this extension hold many samples.
func isContainer(ext string) bool { return ext == "tar" || ext == "jsonl" || ext == "tsv" }

func readCapped(path string, max int64) ([]byte, error) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if info.Size() > max {
		return nil, fmt.Errorf("file %s is %d bytes, over the %d-byte cap", filepath.Base(path), info.Size(), max)
	}
	return os.ReadFile(path)
}

// clipList joins the first n names and says how many more there are.
func clipList(names []string, n int) string {
	if len(names) <= n {
		return strings.Join(names, ", ")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(names[:n], ", "), len(names)-n)
}
