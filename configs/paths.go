package configs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// resolvePaths makes the file paths that a user config file names stand
// on their own: a relative path is taken relative to the directory of that
// file, not to the directory mm runs in (an editor starts mm in the
// project, wherever the config lives), and "~/…" is the home directory,
// as in skills.dirs and tools.sensitive. An absolute path is kept. It runs
// on the user file only: the embedded default names no path.
func resolvePaths(c *Config, file string) error {
	dir := filepath.Dir(file)
	if abs, err := filepath.Abs(dir); err == nil {
		dir = abs
	}
	resolve := func(key string, p *string) error {
		r, err := resolvePath(*p, dir)
		if err != nil {
			return fmt.Errorf("%w %s: %s: %v", ErrConfig, file, key, err)
		}
		*p = r
		return nil
	}
	if err := resolve("model.script", &c.Model.Script); err != nil {
		return err
	}
	for i := range c.Models {
		if err := resolve(fmt.Sprintf("models[%d].script", i), &c.Models[i].Script); err != nil {
			return err
		}
	}
	if err := resolve("prompt.systemFile", &c.Prompt.SystemFile); err != nil {
		return err
	}
	if err := resolve("serve.tls.cert", &c.Serve.TLS.Cert); err != nil {
		return err
	}
	if err := resolve("serve.tls.key", &c.Serve.TLS.Key); err != nil {
		return err
	}
	for i := range c.Serve.Roots {
		if err := resolve(fmt.Sprintf("serve.roots[%d]", i), &c.Serve.Roots[i]); err != nil {
			return err
		}
	}
	for i := range c.Serve.SharedFolders {
		if err := resolve(fmt.Sprintf("serve.sharedFolders[%d]", i), &c.Serve.SharedFolders[i]); err != nil {
			return err
		}
	}
	return nil
}

// resolvePath resolves one path against dir; "" stays "" (no file).
// "~user/…" is left alone, as everywhere else in mm: looking up other
// users' homes is not worth its surprises.
func resolvePath(p, dir string) (string, error) {
	switch {
	case p == "":
		return "", nil
	case p == "~" || strings.HasPrefix(p, "~/"):
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("%q needs a home directory: %v", p, err)
		}
		return filepath.Join(home, strings.TrimPrefix(p, "~")), nil
	case filepath.IsAbs(p):
		return p, nil
	}
	return filepath.Join(dir, p), nil
}
