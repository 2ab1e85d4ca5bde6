package storage

import (
	"errors"
	"fmt"
	"os"
	"os/user"
	"path/filepath"
	"strconv"
	"syscall"

	"github.com/prometheus/prometheus/tsdb/fileutil"
)

// Lock takes the data directory's lock file, the same one Prometheus uses.
// It is taken before anything else touches the directory (the active query
// log is rewritten at start), so a second gpuscope on the same directory
// stops with a clear error instead of disturbing the first.
//
// The error says what is wrong and what to do: only a lock held by another
// process suggests another gpuscope; a directory that cannot be created or
// written says so, with the user it was tried as, because the packaged
// service runs as user gpuscope, not root.
func Lock(dir string) (fileutil.Releaser, error) {
	r, _, err := fileutil.Flock(filepath.Join(dir, "lock"))
	if err != nil {
		return nil, fmt.Errorf("lock data directory %s: %w (%s)", dir, err, lockHint(dir, err))
	}
	return r, nil
}

func lockHint(dir string, err error) string {
	switch {
	case errors.Is(err, syscall.EWOULDBLOCK), errors.Is(err, syscall.EAGAIN):
		return "another process holds its lock: is another gpuscope or Prometheus using it? Stop it or choose another --storage.tsdb.path"
	case errors.Is(err, syscall.EACCES), errors.Is(err, syscall.EPERM):
		return fmt.Sprintf("not writable by user %s; chown it to that user or choose another --storage.tsdb.path", currentUser())
	case errors.Is(err, syscall.EROFS):
		return "it is on a read-only file system; choose a writable --storage.tsdb.path"
	case errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EEXIST):
		return "it or a parent is a file, not a directory; choose another --storage.tsdb.path"
	case errors.Is(err, syscall.ENOSPC):
		return "the disk is full; free space or choose another --storage.tsdb.path"
	}
	if fi, statErr := os.Stat(dir); statErr == nil && !fi.IsDir() {
		return "it is a file, not a directory; choose another --storage.tsdb.path"
	}
	return "choose another --storage.tsdb.path if it cannot be used"
}

func currentUser() string {
	uid := os.Geteuid()
	if u, err := user.LookupId(strconv.Itoa(uid)); err == nil {
		return fmt.Sprintf("%s (uid %d)", u.Username, uid)
	}
	return fmt.Sprintf("uid %d", uid)
}
