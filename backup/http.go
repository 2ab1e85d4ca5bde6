package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// SocketFile names the control socket in the data directory that a
// running appliance takes backups through. A Unix socket, mode 0600, not
// an HTTP endpoint on the listen address: taking a backup writes to the
// data directory's disk, which only the machine's administrators (root,
// and the user gpuscope runs as) may ask for, and it needs neither the
// admin API nor authentication configured for the network.
const SocketFile = "gpuscope.sock"

// Result is what a backup request answers.
type Result struct {
	// Dir is where the backup was taken, under the data directory.
	Dir      string   `json:"dir"`
	Manifest Manifest `json:"manifest"`
}

// HandlerOptions are what the backup endpoint copies from.
type HandlerOptions struct {
	DataDir string
	Logger  *slog.Logger
	// Options returns what to copy, or an error while the appliance cannot
	// be copied yet (its TSDB not open).
	Options func() (Options, error)
	Now     func() time.Time
}

// Handler serves POST /backup: it takes a backup into a new directory
// under DataDir/backups and answers its Result as JSON, or the error as
// text (503 while the TSDB is not open, 500 when the backup failed).
func Handler(o HandlerOptions) http.Handler {
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /backup", func(w http.ResponseWriter, r *http.Request) {
		opts, err := o.Options()
		if err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		if opts.Now == nil {
			opts.Now = now
		}
		dir := filepath.Join(o.DataDir, Dir, now().UTC().Format("2006-01-02T15-04-05.000Z"))
		start := time.Now()
		m, err := Take(dir, opts)
		if err != nil {
			o.Logger.Error("Backup failed", "dir", dir, "err", err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		o.Logger.Info("Backup taken", "dir", dir, "blocks", m.TSDB.Blocks, "series", m.TSDB.NumSeries, "samples", m.TSDB.NumSamples,
			"duration", time.Since(start).Round(time.Millisecond))
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(Result{Dir: dir, Manifest: *m})
	})
	return mux
}

// Serve serves h on the control socket in dataDir until ctx ends, then
// removes the socket. The caller holds the data directory's lock, so a
// socket file already there is a stale one of a gpuscope that was killed.
func Serve(ctx context.Context, dataDir string, h http.Handler, logger *slog.Logger) error {
	path := filepath.Join(dataDir, SocketFile)
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove stale control socket: %w", err)
	}
	l, err := net.Listen("unix", path)
	if err != nil {
		return fmt.Errorf("listen on control socket %s: %w", path, err)
	}
	defer os.Remove(path)
	if err := os.Chmod(path, 0o600); err != nil {
		l.Close()
		return fmt.Errorf("restrict control socket %s: %w", path, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(logger.Handler(), slog.LevelWarn)}
	stop := context.AfterFunc(ctx, func() {
		// A backup in progress finishes (or fails) before the TSDB closes.
		_ = srv.Shutdown(context.Background())
	})
	defer stop()
	if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("serve control socket: %w", err)
	}
	return nil
}

// Ask asks the appliance running on dataDir to take a backup and returns
// its Result. Its errors say what to do: no appliance running there, or
// a user the socket refuses.
func Ask(ctx context.Context, dataDir string) (*Result, error) {
	path := filepath.Join(dataDir, SocketFile)
	client := &http.Client{Transport: &http.Transport{DialContext: unixDialer(path)}}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://gpuscope/backup", nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	switch {
	case errors.Is(err, os.ErrNotExist), errors.Is(err, syscall.ECONNREFUSED):
		return nil, fmt.Errorf("no gpuscope is running on data directory %s (no control socket %s); start it, or name its data directory with --storage.tsdb.path", dataDir, path)
	case errors.Is(err, os.ErrPermission):
		return nil, fmt.Errorf("the control socket %s refuses this user: run the backup as root or as the user gpuscope runs as (sudo -u gpuscope)", path)
	case err != nil:
		return nil, fmt.Errorf("ask gpuscope for a backup over %s: %w", path, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("read the backup's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("gpuscope could not take the backup (%s): %s", resp.Status, strings.TrimSpace(string(body)))
	}
	var res Result
	if err := json.Unmarshal(body, &res); err != nil {
		return nil, fmt.Errorf("the backup's answer: %w", err)
	}
	return &res, nil
}

// Request asks the appliance running on dataDir for a backup (Ask) and,
// with dest, puts it there (Copy); it returns where the backup is.
func Request(ctx context.Context, dataDir, dest string) (string, *Manifest, error) {
	res, err := Ask(ctx, dataDir)
	if err != nil {
		return "", nil, err
	}
	if dest == "" {
		return res.Dir, &res.Manifest, nil
	}
	if err := Copy(res.Dir, dest); err != nil {
		return "", nil, fmt.Errorf("backup taken in %s, but not put into %s: %w", res.Dir, dest, err)
	}
	return dest, &res.Manifest, nil
}

// unixDialer dials the socket at path, whatever address is asked.
func unixDialer(path string) func(ctx context.Context, _, _ string) (net.Conn, error) {
	return func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", path)
	}
}
