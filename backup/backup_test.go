package backup

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/stretchr/testify/require"
)

// states is an Alertmanager's state as WriteState writes it: each name
// a file of those bytes.
type states map[string]string

func (s states) WriteState(dir string) (map[string]int64, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	sizes := map[string]int64{}
	for name, data := range s {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o640); err != nil {
			return nil, err
		}
		sizes[name] = int64(len(data))
	}
	return sizes, nil
}

type failingSnapshot struct{}

func (failingSnapshot) Snapshot(string, bool) error { return errors.New("disk on fire") }

// sample is one stored sample of a series.
type sample struct {
	series string
	t      int64
	v      float64
}

// openTSDB opens a TSDB in dir whose blocks span an hour, so that a
// compaction of the head leaves samples in both a block and the head.
func openTSDB(t *testing.T, dir string) *tsdb.DB {
	t.Helper()
	opts := tsdb.DefaultOptions()
	opts.MinBlockDuration = time.Hour.Milliseconds()
	opts.MaxBlockDuration = time.Hour.Milliseconds()
	db, err := tsdb.Open(dir, slog.New(slog.DiscardHandler), nil, opts, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func appendSamples(t *testing.T, db *tsdb.DB, from int64, n int) []sample {
	t.Helper()
	var out []sample
	app := db.Appender(context.Background())
	for i := range n {
		for _, name := range []string{"a", "b"} {
			ts := from + int64(i)*15_000
			v := float64(i) + 0.5
			_, err := app.Append(0, labels.FromStrings("__name__", "m", "s", name), ts, v)
			require.NoError(t, err)
			out = append(out, sample{`{__name__="m", s="` + name + `"}`, ts, v})
		}
	}
	require.NoError(t, app.Commit())
	return out
}

// allSamples reads every sample of dir's TSDB, opened anew.
func allSamples(t *testing.T, db storage.Queryable) map[sample]bool {
	t.Helper()
	q, err := db.Querier(0, 1<<62)
	require.NoError(t, err)
	defer q.Close()
	set := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchRegexp, "__name__", ".+"))
	out := map[sample]bool{}
	for set.Next() {
		s := set.At()
		it := s.Iterator(nil)
		for it.Next() == chunkenc.ValFloat {
			ts, v := it.At()
			out[sample{s.Labels().String(), ts, v}] = true
		}
		require.NoError(t, it.Err())
	}
	require.NoError(t, set.Err())
	return out
}

func TestTakeAndRestore(t *testing.T) {
	data := t.TempDir()
	db := openTSDB(t, data)
	// Two hours of 15 s samples: compacted, the first hour is a block and
	// the second stays in the head, which the backup writes as a block.
	start := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC).UnixMilli()
	want := appendSamples(t, db, start, 480)
	require.NoError(t, db.Compact(context.Background()))
	require.NotEmpty(t, db.Blocks(), "a block besides the head")
	am := states{"silences": "silence bytes", "nflog": "log bytes"}

	dir := filepath.Join(data, Dir, "one")
	taken := time.Date(2026, 12, 7, 12, 0, 1, 0, time.UTC)
	m, err := Take(dir, Options{TSDB: db, Alertmanager: am, Version: "1.2.3", Now: func() time.Time { return taken }})
	require.NoError(t, err)
	require.Equal(t, "1.2.3", m.Version)
	require.Equal(t, taken, m.Taken)
	require.Equal(t, uint64(len(want)), m.TSDB.NumSamples, "every sample, in a block or the head")
	require.Equal(t, start, m.TSDB.MinTime)
	require.Equal(t, want[len(want)-1].t, m.TSDB.MaxTime)
	require.Equal(t, len(db.Blocks())+1, m.TSDB.Blocks, "the blocks and the head")
	require.Equal(t, map[string]int64{"silences": 13, "nflog": 9}, m.AlertmanagerFiles)
	got, err := Verify(dir)
	require.NoError(t, err)
	require.Equal(t, m, got, "the manifest on disk")

	// Samples appended after the backup are not in it.
	appendSamples(t, db, start+480*15_000, 4)

	into := filepath.Join(t.TempDir(), "restored")
	rm, err := Restore(dir, into)
	require.NoError(t, err)
	require.Equal(t, m, rm)
	for name, data := range am {
		b, err := os.ReadFile(filepath.Join(into, AlertmanagerDir, name))
		require.NoError(t, err)
		require.Equal(t, data, string(b))
	}
	restored := openTSDB(t, into)
	samples := allSamples(t, restored)
	require.Len(t, samples, len(want), "the restored TSDB has the backup's samples and no other")
	for _, s := range want {
		require.True(t, samples[s], "sample %+v restored", s)
	}
}

// TestBadInput: what each bad backup, destination or data directory
// gets; none of them loses what was there.
func TestBadInput(t *testing.T) {
	data := t.TempDir()
	db := openTSDB(t, data)
	appendSamples(t, db, time.Now().UnixMilli(), 10)
	am := states{"silences": "s", "nflog": "n"}
	opts := Options{TSDB: db, Alertmanager: am, Version: "1"}
	good := filepath.Join(data, Dir, "good")
	_, err := Take(good, opts)
	require.NoError(t, err)

	t.Run("take into an existing directory", func(t *testing.T) {
		dir := t.TempDir()
		keep := filepath.Join(dir, "keep")
		require.NoError(t, os.WriteFile(keep, []byte("x"), 0o600))
		_, err := Take(dir, opts)
		require.ErrorContains(t, err, "create backup directory: mkdir "+dir+": file exists")
		require.FileExists(t, keep, "the directory is left as it was")
	})
	t.Run("a snapshot that fails", func(t *testing.T) {
		dir := filepath.Join(data, Dir, "failed")
		_, err := Take(dir, Options{TSDB: failingSnapshot{}, Alertmanager: am})
		require.ErrorContains(t, err, "snapshot the TSDB into "+filepath.Join(dir, TSDBDir)+": disk on fire")
		require.NoDirExists(t, dir, "a failed backup leaves nothing")
	})
	t.Run("nothing to copy from", func(t *testing.T) {
		_, err := Take(filepath.Join(data, Dir, "none"), Options{TSDB: db})
		require.EqualError(t, err, "backup: a TSDB and an Alertmanager to copy are needed")
	})
	t.Run("restore a directory that is no backup", func(t *testing.T) {
		dir := t.TempDir()
		_, err := Restore(dir, filepath.Join(t.TempDir(), "into"))
		require.EqualError(t, err, dir+" is not a gpuscope backup: it has no backup.json (an unfinished backup, or another directory)")
	})
	t.Run("restore a manifest that is not JSON", func(t *testing.T) {
		dir := t.TempDir()
		require.NoError(t, os.WriteFile(filepath.Join(dir, ManifestFile), []byte("{"), 0o600))
		_, err := Restore(dir, filepath.Join(t.TempDir(), "into"))
		require.ErrorContains(t, err, "backup manifest "+filepath.Join(dir, ManifestFile)+": unexpected end of JSON input")
	})
	t.Run("restore a backup missing a block", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "copy")
		require.NoError(t, os.CopyFS(dir, os.DirFS(good)))
		blocks, err := os.ReadDir(filepath.Join(dir, TSDBDir))
		require.NoError(t, err)
		require.NoError(t, os.RemoveAll(filepath.Join(dir, TSDBDir, blocks[0].Name())))
		into := filepath.Join(t.TempDir(), "into")
		_, err = Restore(dir, into)
		require.ErrorContains(t, err, "backup "+dir+" is damaged: its blocks hold {Blocks:0")
		require.NoDirExists(t, into, "nothing restored from a damaged backup")
	})
	t.Run("restore a backup missing the Alertmanager's state", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "copy")
		require.NoError(t, os.CopyFS(dir, os.DirFS(good)))
		require.NoError(t, os.Remove(filepath.Join(dir, AlertmanagerDir, "silences")))
		_, err := Restore(dir, filepath.Join(t.TempDir(), "into"))
		require.ErrorContains(t, err, "backup "+dir+" is damaged: stat "+filepath.Join(dir, AlertmanagerDir, "silences")+": no such file or directory")
	})
	t.Run("restore into a used data directory", func(t *testing.T) {
		_, err := Restore(good, data)
		require.ErrorContains(t, err, "data directory "+data+" is not empty (it holds ")
		require.ErrorContains(t, err, "): restore into an empty one, or move this one aside first")
		require.NoFileExists(t, filepath.Join(data, ManifestFile), "nothing copied into it")
	})
	t.Run("copy to a directory that exists", func(t *testing.T) {
		dst := t.TempDir()
		require.EqualError(t, Copy(good, dst), dst+" exists: name a new directory for the backup")
		require.FileExists(t, filepath.Join(good, ManifestFile), "the backup stays where it was")
	})
}

// TestCopyAcrossFilesystems: where a rename cannot move the backup (here
// /dev/shm, a tmpfs, against the test's temporary directory), Copy copies
// it, manifest and all, and removes the original.
func TestCopyAcrossFilesystems(t *testing.T) {
	shm, err := os.MkdirTemp("/dev/shm", "gpuscope-backup-test-")
	if err != nil {
		t.Skipf("no /dev/shm to copy to: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(shm) })
	data := t.TempDir()
	db := openTSDB(t, data)
	appendSamples(t, db, time.Now().UnixMilli(), 10)
	src := filepath.Join(data, Dir, "b")
	m, err := Take(src, Options{TSDB: db, Alertmanager: states{"silences": "s"}})
	require.NoError(t, err)
	dst := filepath.Join(shm, "nested", "b")
	require.NoError(t, Copy(src, dst))
	require.NoDirExists(t, src)
	got, err := Verify(dst)
	require.NoError(t, err)
	require.Equal(t, m, got)
}

// TestSocket: a backup asked over the control socket, and what Ask says
// when no appliance serves the socket or it cannot take one.
func TestSocket(t *testing.T) {
	data := t.TempDir()
	db := openTSDB(t, data)
	appendSamples(t, db, time.Now().UnixMilli(), 10)
	logger := slog.New(slog.DiscardHandler)

	_, err := Ask(t.Context(), data)
	require.EqualError(t, err, "no gpuscope is running on data directory "+data+" (no control socket "+filepath.Join(data, SocketFile)+"); start it, or name its data directory with --storage.tsdb.path")

	var notOpen atomic.Bool
	h := Handler(HandlerOptions{DataDir: data, Logger: logger, Options: func() (Options, error) {
		if notOpen.Load() {
			return Options{}, errors.New("the TSDB is not open yet")
		}
		return Options{TSDB: db, Alertmanager: states{"silences": "s"}, Version: "9"}, nil
	}})
	// A stale socket of a killed appliance does not stop the next one.
	require.NoError(t, os.WriteFile(filepath.Join(data, SocketFile), nil, 0o600))
	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, data, h, logger) }()
	require.Eventually(t, func() bool {
		fi, err := os.Stat(filepath.Join(data, SocketFile))
		return err == nil && fi.Mode()&os.ModeSocket != 0
	}, 10*time.Second, 10*time.Millisecond)
	fi, err := os.Stat(filepath.Join(data, SocketFile))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "root and gpuscope's user only")

	dir, m, err := Request(t.Context(), data, "")
	require.NoError(t, err)
	require.Equal(t, filepath.Join(data, Dir), filepath.Dir(dir))
	require.Equal(t, uint64(20), m.TSDB.NumSamples)
	dest := filepath.Join(t.TempDir(), "mine")
	dir, _, err = Request(t.Context(), data, dest)
	require.NoError(t, err)
	require.Equal(t, dest, dir)
	_, err = Verify(dest)
	require.NoError(t, err)

	notOpen.Store(true)
	_, err = Ask(t.Context(), data)
	require.EqualError(t, err, "gpuscope could not take the backup (503 Service Unavailable): the TSDB is not open yet")

	resp, err := (&http.Client{Transport: &http.Transport{DialContext: unixDialer(filepath.Join(data, SocketFile))}}).Get("http://gpuscope/backup")
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, "a backup is a POST")

	cancel()
	require.NoError(t, <-served)
	require.NoFileExists(t, filepath.Join(data, SocketFile), "the socket goes with the appliance")
}
