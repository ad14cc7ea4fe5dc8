package connect

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

// ConfigEnv names the config file when --config is not given.
const ConfigEnv = "SLUICE_CONFIG"

// Flags are the connection flags registered on one command's FlagSet.
type Flags struct {
	parts  Parts
	fs     *flag.FlagSet
	vals   map[string]*string
	config string

	// LookupEnv reads the environment; os.LookupEnv when nil (tests
	// replace it).
	LookupEnv func(string) (string, bool)
}

// Register adds the flags of parts, and --config, to fs; call it once per
// FlagSet, with every part the command needs. Call Resolve after fs.Parse.
func Register(fs *flag.FlagSet, parts Parts) *Flags {
	f := &Flags{parts: parts, fs: fs, vals: map[string]*string{}}
	fs.StringVar(&f.config, "config", "", "YAML `file` with connection settings (env "+ConfigEnv+"); flags and env override it")
	for _, s := range settings {
		if s.part&parts == 0 {
			continue
		}
		v := &stringValue{s: s.def, isBool: s.isBool}
		f.vals[s.name] = &v.s
		fs.Var(v, s.name, fmt.Sprintf("%s (env %s, file %s)", s.usage, s.env, s.key))
	}
	return f
}

// Resolve merges flags (those given), environment, config file and
// defaults, and validates the result. The error lists every problem, one
// per line (errors.Join), each naming its flag, variable or file key.
func (f *Flags) Resolve() (Config, error) {
	lookup := f.LookupEnv
	if lookup == nil {
		lookup = os.LookupEnv
	}
	given := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { given[fl.Name] = true })

	var problems []string
	path, pathFrom := f.config, "--config"
	if !given["config"] {
		path, pathFrom = "", ""
		if v, ok := lookup(ConfigEnv); ok && v != "" {
			path, pathFrom = v, ConfigEnv
		}
	}
	var file map[string]fileValue
	if path != "" {
		var fp []string
		file, fp = readFile(path)
		for _, p := range fp {
			problems = append(problems, pathFrom+": "+p)
		}
	}

	c := Config{}
	from := map[string]string{}
	defaulted := map[string]bool{}
	for _, s := range settings {
		if s.part&f.parts == 0 {
			if s.def != "" {
				_ = s.set(&c, s.def)
			}
			continue
		}
		var v, where string
		if env, ok := lookup(s.env); given[s.name] {
			v, where = *f.vals[s.name], "--"+s.name
		} else if ok && env != "" {
			v, where = env, s.env
		} else if fv, ok := file[s.key]; ok {
			v, where = fv.value, fmt.Sprintf("%s (%s:%d)", s.key, path, fv.line)
		} else {
			v, where = s.def, "--"+s.name
			defaulted[s.name] = true
		}
		from[s.name] = where
		if v == "" && s.isBool {
			defaulted[s.name] = true // an empty SLUICE_S3_PATH_STYLE too
			continue
		}
		if err := s.set(&c, v); err != nil {
			problems = append(problems, describe(where, s, v)+": "+err.Error())
			if s.def != "" {
				_ = s.set(&c, s.def) // reported once, not again by validate
			}
		}
	}
	if f.parts&PartS3 != 0 && defaulted["s3-path-style"] {
		c.S3.PathStyle = c.S3.Endpoint != ""
	}
	problems = append(problems, validate(c, func(name string) string {
		if w, ok := from[name]; ok {
			return w
		}
		return "--" + name
	})...)
	return c, joinProblems(problems)
}

// describe names a value for an error message, without secrets.
func describe(where string, s setting, v string) string {
	switch {
	case s.secret:
		return where
	case s.url:
		v = redactURLs(splitList(v))
	}
	return fmt.Sprintf("%s %q", where, v)
}

func joinProblems(ps []string) error {
	errs := make([]error, len(ps))
	for i, p := range ps {
		errs[i] = errors.New(p)
	}
	return errors.Join(errs...)
}

// stringValue is a flag.Value holding text; isBool makes `--flag` alone
// mean true.
type stringValue struct {
	s      string
	isBool bool
}

func (v *stringValue) String() string     { return v.s }
func (v *stringValue) Set(s string) error { v.s = s; return nil }
func (v *stringValue) IsBoolFlag() bool   { return v.isBool }

// names lists a setting's three names, for messages that ask for one.
func names(name string) string {
	for _, s := range settings {
		if s.name == name {
			return strings.Join([]string{"--" + s.name, s.env, s.key}, ", ")
		}
	}
	return "--" + name
}
