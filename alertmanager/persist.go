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
	tmp, err := os.CreateTemp(filepath.Dir(f.path), filepath.Base(f.path)+".*.tmp")
	if err != nil {
		return 0, fmt.Errorf("write %s: %w", f.path, err)
	}
	size, err := f.snapshot(tmp)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), f.path)
	}
	if err != nil {
		return 0, errors.Join(fmt.Errorf("write %s: %w", f.path, err), os.Remove(tmp.Name()))
	}
	return size, nil
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
