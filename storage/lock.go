package storage

import (
	"fmt"
	"path/filepath"

	"github.com/prometheus/prometheus/tsdb/fileutil"
)

// Lock takes the data directory's lock file, the same one Prometheus uses.
// It is taken before anything else touches the directory (the active query
// log is rewritten at start), so a second gpuscope on the same directory
// stops with a clear error instead of disturbing the first.
func Lock(dir string) (fileutil.Releaser, error) {
	r, _, err := fileutil.Flock(filepath.Join(dir, "lock"))
	if err != nil {
		return nil, fmt.Errorf("lock data directory %s: %w (is another gpuscope or Prometheus using it?)", dir, err)
	}
	return r, nil
}
