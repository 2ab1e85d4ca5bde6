package alertmanager

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/alertmanager/nflog"
	"github.com/prometheus/alertmanager/nflog/nflogpb"
	"github.com/prometheus/alertmanager/notify"
)

// Alertmanager writes its silences and notification log every 15 minutes
// and when it stops; one killed between two writes forgets the silences
// set and the notifications sent since the last, and so sends again what
// it had sent. gpuscope writes each when it changes, before the change is
// acknowledged: a silence before the API answers, a notification log
// entry before the pipeline goes on (persistedLog). Each write is the
// whole state, replacing the file atomically, as Alertmanager's own
// snapshot does; both are small (a few hundred bytes per silence or per
// group and receiver), and they change when a person acts or a
// notification is sent, not on every alert (BenchmarkSnapshot).

// stateFile is one snapshot file, written whole by one writer at a time:
// a later write always holds a later state, whoever wrote it
// (Alertmanager's maintenance or a change).
type stateFile struct {
	path     string
	snapshot func(io.Writer) (int64, error)
	mu       sync.Mutex
}

// write replaces the file with the current state and syncs it.
func (f *stateFile) write() (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.writeTo(f.path)
}

// writeTo writes the current state to path, atomically; f.mu is held.
func (f *stateFile) writeTo(path string) (int64, error) {
	tmp, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".*.tmp")
	if err != nil {
		return 0, fmt.Errorf("write %s: %w", path, err)
	}
	size, err := f.snapshot(tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return 0, errors.Join(fmt.Errorf("write %s: %w", path, err), os.Remove(tmp.Name()))
	}
	return size, nil
}

// WriteState writes the silences and the notification log, as they are
// now, into dir under the names New loads them from (a backup); it
// returns each file's size.
func (a *Alertmanager) WriteState(dir string) (map[string]int64, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	sizes := map[string]int64{}
	for _, f := range []*stateFile{a.silencesFile, a.nflogFile} {
		f.mu.Lock()
		name := filepath.Base(f.path)
		size, err := f.writeTo(filepath.Join(dir, name))
		f.mu.Unlock()
		if err != nil {
			return nil, err
		}
		sizes[name] = size
	}
	return sizes, nil
}

// persistedLog is the notification log as the notify pipeline uses it:
// an entry, logged once its notification was sent, is on disk before the
// pipeline goes on.
type persistedLog struct {
	log    *nflog.Log
	file   *stateFile
	logger *slog.Logger
}

var _ notify.NotificationLog = (*persistedLog)(nil)

func (l *persistedLog) Query(params ...nflog.QueryParam) ([]*nflogpb.Entry, error) {
	return l.log.Query(params...)
}

func (l *persistedLog) Log(r *nflogpb.Receiver, gkey string, firing, resolved []uint64, store *nflog.Store, expiry time.Duration) error {
	if err := l.log.Log(r, gkey, firing, resolved, store, expiry); err != nil {
		return err
	}
	// The notification went out; failing here would only send it again.
	if _, err := l.file.write(); err != nil {
		l.logger.Error("Notification log not written; after a crash this notification may be sent again", "err", err)
	}
	return nil
}
