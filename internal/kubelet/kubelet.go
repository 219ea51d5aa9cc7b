// Package kubelet writes a folder as the kubelet writes a secret or a
// config map in a pod, for the tests that attack what mm hides there.
package kubelet

import (
	"os"
	"path/filepath"
)

// Write writes files in dir as the kubelet does: in a new folder stamp
// (..2026_…), which the link ..data then leads to, each file a link
// through ..data; the folder's older stamps stay until the kubelet cleans
// them. Called again with a new stamp, it is the secret changed in place.
func Write(dir, stamp string, files map[string]string) error {
	if err := os.Mkdir(filepath.Join(dir, stamp), 0o755); err != nil {
		return err
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, stamp, name), []byte(data), 0o644); err != nil {
			return err
		}
		if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil && !os.IsExist(err) {
			return err
		}
	}
	tmp := filepath.Join(dir, "..data_tmp")
	if err := os.Symlink(stamp, tmp); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(dir, "..data"))
}
