// Package backup takes a consistent copy of what a gpuscope appliance
// must not lose and restores one into an empty data directory.
//
// What must survive is the TSDB and the embedded Alertmanager's state
// (silences and notification log). Accounting, run reports and digests
// keep nothing of their own: they are recording rules and queries over
// the TSDB, so a copy of the TSDB is a copy of them.
//
// A backup is a directory:
//
//	tsdb/            the TSDB's blocks, and its head written as a block
//	                 (tsdb.DB.Snapshot with the head, as Prometheus's
//	                 admin API snapshot)
//	alertmanager/    silences and nflog, the snapshot files Alertmanager
//	                 itself writes and loads
//	backup.json      the manifest, written last: a directory without it
//	                 is an unfinished backup and is refused by Restore
//
// The TSDB snapshot hard-links the blocks' files, so it is taken on the
// data directory's filesystem (Take writes into a directory there) and
// costs no space until compaction replaces the blocks; Copy then moves or
// copies it where the user asked.
package backup

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/prometheus/prometheus/tsdb"
)

const (
	// ManifestFile names the manifest in a backup directory.
	ManifestFile = "backup.json"
	// TSDBDir and AlertmanagerDir name a backup's two parts.
	TSDBDir         = "tsdb"
	AlertmanagerDir = "alertmanager"
	// Dir is where, under the data directory, the appliance takes
	// backups.
	Dir = "backups"
)

// Manifest describes a backup.
type Manifest struct {
	// Version is the gpuscope that took it.
	Version string    `json:"version"`
	Taken   time.Time `json:"taken"`
	TSDB    TSDB      `json:"tsdb"`
	// AlertmanagerFiles are the state files copied, with their sizes.
	AlertmanagerFiles map[string]int64 `json:"alertmanager"`
}

// TSDB sums up the blocks of a backup.
type TSDB struct {
	Blocks int `json:"blocks"`
	// MinTime and MaxTime (ms) bound the samples: every sample the
	// appliance had stored when the backup was taken lies in them.
	MinTime    int64  `json:"min_time"`
	MaxTime    int64  `json:"max_time"`
	NumSamples uint64 `json:"samples"`
	NumSeries  uint64 `json:"series"`
}

// Snapshotter writes the TSDB's blocks, and with withHead its in-memory
// head as one more block, into dir (storage.Ready, tsdb.DB).
type Snapshotter interface {
	Snapshot(dir string, withHead bool) error
}

// StateWriter writes the embedded Alertmanager's state files into dir
// and returns their names and sizes.
type StateWriter interface {
	WriteState(dir string) (map[string]int64, error)
}

// Options are what Take copies from.
type Options struct {
	TSDB         Snapshotter
	Alertmanager StateWriter
	Version      string
	// Now is the clock stamped into the manifest (time.Now if nil).
	Now func() time.Time
}

// Take writes a backup into dir, which must not exist yet; its parent
// must be on the data directory's filesystem (see the package comment).
// A failed backup leaves nothing behind.
func Take(dir string, o Options) (m *Manifest, err error) {
	if o.TSDB == nil || o.Alertmanager == nil {
		return nil, errors.New("backup: a TSDB and an Alertmanager to copy are needed")
	}
	now := time.Now
	if o.Now != nil {
		now = o.Now
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o750); err != nil {
		return nil, fmt.Errorf("create the backup's parent directory: %w", err)
	}
	if err := os.Mkdir(dir, 0o750); err != nil {
		return nil, fmt.Errorf("create backup directory: %w", err)
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, os.RemoveAll(dir))
		}
	}()
	taken := now()
	// Alertmanager's state first: silences set after this moment are not
	// in the backup, and neither are samples appended after the head is
	// written, so the manifest's time is the earlier of the two.
	amFiles, err := o.Alertmanager.WriteState(filepath.Join(dir, AlertmanagerDir))
	if err != nil {
		return nil, fmt.Errorf("copy the Alertmanager's silences and notification log: %w", err)
	}
	tsdbDir := filepath.Join(dir, TSDBDir)
	if err := o.TSDB.Snapshot(tsdbDir, true); err != nil {
		return nil, fmt.Errorf("snapshot the TSDB into %s: %w", tsdbDir, err)
	}
	sum, err := blocks(tsdbDir)
	if err != nil {
		return nil, err
	}
	m = &Manifest{Version: o.Version, Taken: taken.UTC(), TSDB: sum, AlertmanagerFiles: amFiles}
	if err := writeManifest(dir, m); err != nil {
		return nil, err
	}
	return m, nil
}

// ReadManifest reads a backup's manifest; a directory without one is not
// a (finished) backup.
func ReadManifest(dir string) (*Manifest, error) {
	data, err := os.ReadFile(filepath.Join(dir, ManifestFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s is not a gpuscope backup: it has no %s (an unfinished backup, or another directory)", dir, ManifestFile)
	}
	if err != nil {
		return nil, fmt.Errorf("read backup manifest: %w", err)
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("backup manifest %s: %w", filepath.Join(dir, ManifestFile), err)
	}
	return &m, nil
}

// Verify checks that a backup is whole: its manifest, and each block it
// lists opens with the number of samples and series the manifest says.
func Verify(dir string) (*Manifest, error) {
	m, err := ReadManifest(dir)
	if err != nil {
		return nil, err
	}
	got, err := blocks(filepath.Join(dir, TSDBDir))
	if err != nil {
		return nil, err
	}
	if got != m.TSDB {
		return nil, fmt.Errorf("backup %s is damaged: its blocks hold %+v, its manifest says %+v", dir, got, m.TSDB)
	}
	for name := range m.AlertmanagerFiles {
		if _, err := os.Stat(filepath.Join(dir, AlertmanagerDir, name)); err != nil {
			return nil, fmt.Errorf("backup %s is damaged: %w", dir, err)
		}
	}
	return m, nil
}

// Copy puts the backup at src into dst, which must not exist: a rename
// where both are on one filesystem, otherwise a copy followed by the
// removal of src. The manifest is copied last, so an interrupted copy is
// no backup.
func Copy(src, dst string) error {
	if _, err := os.Lstat(dst); err == nil {
		return fmt.Errorf("%s exists: name a new directory for the backup", dst)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o750); err != nil {
		return fmt.Errorf("create the backup's parent directory: %w", err)
	}
	if err := os.Rename(src, dst); err == nil {
		return nil
	}
	if err := copyTree(src, dst); err != nil {
		return errors.Join(fmt.Errorf("copy the backup to %s: %w", dst, err), os.RemoveAll(dst))
	}
	if err := os.RemoveAll(src); err != nil {
		return fmt.Errorf("remove %s after copying it to %s: %w", src, dst, err)
	}
	return nil
}

// Restore puts the backup at src into dataDir, which must be empty or not
// exist (a backup is not merged into a running or used data directory),
// and returns its manifest. It verifies the backup first; what it copies
// is owned by the user running it, who should be the one gpuscope runs
// as.
func Restore(src, dataDir string) (*Manifest, error) {
	m, err := Verify(src)
	if err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(dataDir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if err := os.MkdirAll(dataDir, 0o750); err != nil {
			return nil, fmt.Errorf("create data directory: %w", err)
		}
	case err != nil:
		return nil, fmt.Errorf("read data directory: %w", err)
	case len(entries) > 0:
		return nil, fmt.Errorf("data directory %s is not empty (it holds %s): restore into an empty one, or move this one aside first", dataDir, entries[0].Name())
	}
	if err := os.CopyFS(dataDir, os.DirFS(filepath.Join(src, TSDBDir))); err != nil {
		return nil, fmt.Errorf("copy the TSDB's blocks into %s: %w", dataDir, err)
	}
	if err := os.CopyFS(filepath.Join(dataDir, AlertmanagerDir), os.DirFS(filepath.Join(src, AlertmanagerDir))); err != nil {
		return nil, fmt.Errorf("copy the Alertmanager's state into %s: %w", dataDir, err)
	}
	return m, nil
}

// blocks sums up the block metas under dir.
func blocks(dir string) (TSDB, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return TSDB{}, fmt.Errorf("read the backup's blocks: %w", err)
	}
	var (
		sum   TSDB
		metas []tsdb.BlockMeta
	)
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, e.Name(), "meta.json"))
		if err != nil {
			return TSDB{}, fmt.Errorf("read block %s: %w", e.Name(), err)
		}
		var meta tsdb.BlockMeta
		if err := json.Unmarshal(data, &meta); err != nil {
			return TSDB{}, fmt.Errorf("block %s: meta.json: %w", e.Name(), err)
		}
		metas = append(metas, meta)
	}
	for i, meta := range metas {
		if i == 0 || meta.MinTime < sum.MinTime {
			sum.MinTime = meta.MinTime
		}
		// A block's MaxTime is exclusive.
		sum.MaxTime = max(sum.MaxTime, meta.MaxTime-1)
		sum.NumSamples += meta.Stats.NumSamples
		sum.NumSeries += meta.Stats.NumSeries
	}
	sum.Blocks = len(metas)
	return sum, nil
}

func writeManifest(dir string, m *Manifest) error {
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("encode backup manifest: %w", err)
	}
	f, err := os.OpenFile(filepath.Join(dir, ManifestFile), os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o640)
	if err != nil {
		return fmt.Errorf("write backup manifest: %w", err)
	}
	_, err = f.Write(append(data, '\n'))
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// copyTree copies src to dst, the manifest last.
func copyTree(src, dst string) error {
	err := os.CopyFS(dst, fsWithout{os.DirFS(src), ManifestFile})
	if err != nil {
		return err
	}
	data, err := os.ReadFile(filepath.Join(src, ManifestFile))
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dst, ManifestFile), data, 0o640)
}

// fsWithout is a file system without one top-level file.
type fsWithout struct {
	fs.FS
	name string
}

func (f fsWithout) ReadDir(name string) ([]fs.DirEntry, error) {
	entries, err := fs.ReadDir(f.FS, name)
	if name == "." {
		entries = slices.DeleteFunc(entries, func(e fs.DirEntry) bool { return e.Name() == f.name })
	}
	return entries, err
}

// Describe says in one line what a backup holds.
func Describe(dir string, m *Manifest) string {
	from, to := time.UnixMilli(m.TSDB.MinTime).UTC(), time.UnixMilli(m.TSDB.MaxTime).UTC()
	if m.TSDB.Blocks == 0 {
		return fmt.Sprintf("backup %s (gpuscope %s, taken %s): no samples yet; Alertmanager state %v", dir, m.Version, m.Taken.Format(time.RFC3339), m.AlertmanagerFiles)
	}
	return fmt.Sprintf("backup %s (gpuscope %s, taken %s): %d blocks, %d series, %d samples from %s to %s; Alertmanager state %v",
		dir, m.Version, m.Taken.Format(time.RFC3339), m.TSDB.Blocks, m.TSDB.NumSeries, m.TSDB.NumSamples,
		from.Format(time.RFC3339), to.Format(time.RFC3339), m.AlertmanagerFiles)
}
