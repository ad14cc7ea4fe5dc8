package connect

// Args are the flags that give a child process (a `sluice fn serve`
// replica the controller starts) the settings of parts in c. Secrets,
// and URLs with credentials in them, are not among them: argv is visible
// to every user of the machine; Env carries them.
func (c Config) Args(parts Parts) []string {
	var args []string
	for _, s := range settings {
		if s.part&parts == 0 || s.isSecret(c) {
			continue
		}
		v := s.get(c)
		if v == "" {
			continue
		}
		if s.isBool && v == "false" && s.name == "s3-path-style" && c.S3.Endpoint == "" {
			continue // the default without an endpoint
		}
		args = append(args, "--"+s.name+"="+v)
	}
	return args
}

// Env is the environment a child process needs besides Args; append it
// after os.Environ() (exec.Cmd keeps the last value of a name). It carries
// the secrets of parts in c, and clears what the child would otherwise
// inherit and read instead: the other SLUICE_* variables of parts (their
// values are in Args) and SLUICE_CONFIG (the parent has already folded the
// file into Args and Env). AWS credentials are not in it: the child finds
// them the way its parent did, through the SDK's default chain
// (inherited environment, profile, role).
func (c Config) Env(parts Parts) []string {
	env := []string{ConfigEnv + "="}
	for _, s := range settings {
		if s.part&parts == 0 {
			continue
		}
		v := ""
		if s.isSecret(c) {
			v = s.get(c)
		}
		env = append(env, s.env+"="+v)
	}
	return env
}
