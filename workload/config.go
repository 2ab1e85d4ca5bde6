package workload

import (
	"path/filepath"
)

// Config is the `workloads:` section of gpuscope's config file.
type Config struct {
	// PasswdFile names the user label's uids (UsersOptions.PasswdFile);
	// empty: /etc/passwd of the host root (DefaultHostRoot). A relative
	// path is relative to the config file.
	PasswdFile string `yaml:"passwd_file"`
}

// SetDirectory resolves a relative PasswdFile against dir, the config
// file's folder, as Prometheus resolves its files.
func (c *Config) SetDirectory(dir string) {
	if c.PasswdFile != "" && !filepath.IsAbs(c.PasswdFile) {
		c.PasswdFile = filepath.Join(dir, c.PasswdFile)
	}
}
