package connect

// Args are the flags that give a child process (a `sluice fn serve`
// replica the controller starts) the settings of parts in c. Secrets are
// not among them: argv is visible to every user of the machine; Env
// carries them.
func (c Config) Args(parts Parts) []string {
	var args []string
	for _, s := range settings {
		if s.part&parts == 0 || s.secret {
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

// Env is the NAME=value environment a child process needs besides Args:
// the secrets of parts in c. AWS credentials are not in it: the child
// finds them the way its parent did, through the SDK's default chain
// (inherited environment, profile, role).
func (c Config) Env(parts Parts) []string {
	var env []string
	for _, s := range settings {
		if s.part&parts == 0 || !s.secret {
			continue
		}
		if v := s.get(c); v != "" {
			env = append(env, s.env+"="+v)
		}
	}
	return env
}
