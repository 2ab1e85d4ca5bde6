package storage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunks"
	"github.com/prometheus/prometheus/tsdb/fileutil"
	"github.com/prometheus/prometheus/tsdb/index"
)

// CorruptedDir is where damaged blocks are moved, inside the data
// directory. The TSDB only loads directories named by a ULID, so what is
// here is kept for inspection and never served; delete it once looked at.
const CorruptedDir = "corrupted"

// What Prometheus's tsdb.Open does with damage, and what gpuscope adds:
//
//   - WAL: a torn or garbled record makes the head's replay fail; Open then
//     repairs the WAL (wlog.Repair): it keeps the records before the
//     damage, drops the rest of that segment and every later segment, and
//     goes on with what it replayed. It logs where, but not how much was
//     lost: walReport adds that.
//   - A block whose chunk file or index does not open (bad magic, short
//     header, bad table of contents) fails Open as a whole ("corrupted
//     block <ulid>"): nothing would start. A block whose meta.json does
//     not parse is skipped with an error at every reload (each minute).
//   - A block whose chunk data or series entries are damaged opens fine;
//     every query touching it then fails with a checksum error, and so
//     does every compaction that includes it.
//
// checkBlocks therefore reads every block through its index before Open —
// each series entry and each chunk, which verifies their CRC32s — and
// moves a block that fails to <data>/corrupted/<ulid>, logging its time
// range and series count, so that Open loads the rest.

// quarantined is one block set aside.
type quarantined struct {
	ULID string
	Meta *tsdb.BlockMeta // nil when meta.json itself is unreadable
	Err  error
}

// checkBlocks verifies every block in dir and moves the damaged ones to
// dir/corrupted. A damaged block whose data a loadable block already holds
// (it is listed among that block's compaction parents: a crash between
// compaction and deletion) is left for the TSDB to delete.
// With full false only what the TSDB's Open checks is checked (that the
// block's files open), so that a bad header sets the block aside rather
// than stopping the start.
func checkBlocks(dir string, full bool, logger *slog.Logger) (moved []quarantined, checked int, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, 0, nil
		}
		return nil, 0, fmt.Errorf("list blocks: %w", err)
	}
	var names []string
	for _, e := range entries {
		if _, err := ulid.ParseStrict(e.Name()); err == nil && e.IsDir() {
			names = append(names, e.Name())
		}
	}
	// Blocks are checked in parallel: the check is CPU-bound (CRC32 and
	// index decoding, ~400 MB/s a core) once the files are in the page
	// cache.
	errs := make([]error, len(names))
	work := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(names)) {
		wg.Go(func() {
			for i := range work {
				errs[i] = verifyBlock(filepath.Join(dir, names[i]), full)
			}
		})
	}
	for i := range names {
		work <- i
	}
	close(work)
	wg.Wait()

	var (
		bad     []quarantined
		parents = map[string]string{} // parent ULID -> the loadable block holding its data
	)
	for i, name := range names {
		meta, merr := readMeta(filepath.Join(dir, name))
		if errs[i] != nil {
			bad = append(bad, quarantined{ULID: name, Meta: meta, Err: errs[i]})
			continue
		}
		if merr != nil {
			continue // verifyBlock read it a moment ago
		}
		for _, p := range meta.Compaction.Parents {
			parents[p.ULID.String()] = name
		}
	}

	for _, q := range bad {
		if child, ok := parents[q.ULID]; ok {
			logger.Warn("Damaged block already compacted into another; the TSDB deletes it", "block", q.ULID, "compacted_into", child, "err", q.Err)
			continue
		}
		to, err := moveAside(dir, q.ULID)
		if err != nil {
			return moved, len(names), fmt.Errorf("set damaged block %s aside: %w (its error: %w)", q.ULID, err, q.Err)
		}
		args := []any{"block", q.ULID, "moved_to", to, "err", q.Err}
		if m := q.Meta; m != nil {
			args = append(args,
				"from", time.UnixMilli(m.MinTime).UTC().Format(time.RFC3339),
				"to", time.UnixMilli(m.MaxTime).UTC().Format(time.RFC3339),
				"series", m.Stats.NumSeries,
				"samples", m.Stats.NumSamples)
		} else {
			args = append(args, "from", "unknown", "to", "unknown (meta.json unreadable)")
		}
		logger.Error("Damaged block set aside; its samples are not served", args...)
		moved = append(moved, q)
	}
	return moved, len(names), nil
}

// verifyBlock opens the block as the TSDB would, then (if full) reads
// every series entry of its index and every chunk they reference: both
// carry CRC32s, which the readers check.
func verifyBlock(dir string, full bool) (err error) {
	b, err := tsdb.OpenBlock(nil, dir, nil, nil)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, b.Close()) }()
	if !full {
		return nil
	}
	ir, err := b.Index()
	if err != nil {
		return err
	}
	defer ir.Close()
	cr, err := b.Chunks()
	if err != nil {
		return err
	}
	defer cr.Close()

	name, value := index.AllPostingsKey()
	p, err := ir.Postings(context.Background(), name, value)
	if err != nil {
		return fmt.Errorf("read postings: %w", err)
	}
	var (
		builder labels.ScratchBuilder
		chks    []chunks.Meta
		series  uint64
	)
	for p.Next() {
		if err := ir.Series(p.At(), &builder, &chks); err != nil {
			return fmt.Errorf("read series %d of the index: %w", series, err)
		}
		for _, c := range chks {
			chk, iter, err := cr.ChunkOrIterable(c)
			if err != nil {
				return fmt.Errorf("read chunk %d of series %s: %w", c.Ref, builder.Labels(), err)
			}
			if chk == nil && iter == nil {
				return fmt.Errorf("chunk %d of series %s is missing", c.Ref, builder.Labels())
			}
		}
		series++
	}
	if err := p.Err(); err != nil {
		return fmt.Errorf("read postings: %w", err)
	}
	if m := b.Meta(); series != m.Stats.NumSeries {
		return fmt.Errorf("index has %d series, meta.json says %d", series, m.Stats.NumSeries)
	}
	return nil
}

func readMeta(dir string) (*tsdb.BlockMeta, error) {
	b, err := os.ReadFile(filepath.Join(dir, "meta.json"))
	if err != nil {
		return nil, err
	}
	var m tsdb.BlockMeta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("parse meta.json: %w", err)
	}
	return &m, nil
}

// moveAside renames dir/name to dir/corrupted/name (name.1, name.2, … if
// a block of that name was set aside before).
func moveAside(dir, name string) (string, error) {
	cdir := filepath.Join(dir, CorruptedDir)
	if err := os.MkdirAll(cdir, 0o777); err != nil {
		return "", err
	}
	to := filepath.Join(cdir, name)
	for i := 1; ; i++ {
		if _, err := os.Stat(to); errors.Is(err, fs.ErrNotExist) {
			break
		}
		to = filepath.Join(cdir, name+"."+strconv.Itoa(i))
	}
	if err := fileutil.Replace(filepath.Join(dir, name), to); err != nil {
		return "", err
	}
	return to, nil
}

// countCorrupted is the number of blocks in dir/corrupted.
func countCorrupted(dir string) int {
	entries, err := os.ReadDir(filepath.Join(dir, CorruptedDir))
	if err != nil {
		return 0
	}
	n := 0
	for _, e := range entries {
		if e.IsDir() {
			n++
		}
	}
	return n
}

// walSegment is one WAL segment file as found before Open.
type walSegment struct {
	name string
	info fs.FileInfo
}

// statWAL lists the WAL's segment files (not the checkpoint).
func statWAL(dir string) []walSegment {
	entries, err := os.ReadDir(filepath.Join(dir, "wal"))
	if err != nil {
		return nil
	}
	var segs []walSegment
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil || e.IsDir() {
			continue
		}
		if fi, err := e.Info(); err == nil {
			segs = append(segs, walSegment{e.Name(), fi})
		}
	}
	return segs
}

// walReport logs what a WAL repair during Open dropped. A repair rewrites
// the damaged segment (a new file with the records before the damage,
// compressed as the WAL now is) and deletes the segments after it; nothing
// else changes existing segments while the TSDB opens. The TSDB's own log
// line ("Starting corruption repair") has the offset of the damage; this
// one says what it means: samples after kept_until are gone.
func walReport(dir string, before []walSegment, headMaxt int64, logger *slog.Logger) {
	var (
		rewritten    []string
		removed      []string
		removedBytes int64
	)
	for _, s := range before {
		fi, err := os.Stat(filepath.Join(dir, "wal", s.name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			removed = append(removed, s.name)
			removedBytes += s.info.Size()
		case err == nil && !os.SameFile(s.info, fi):
			rewritten = append(rewritten, fmt.Sprintf("%s (%d bytes before)", s.name, s.info.Size()))
		}
	}
	if len(rewritten) == 0 && len(removed) == 0 {
		return
	}
	args := []any{"rewritten_segment", rewritten}
	if len(removed) > 0 {
		args = append(args, "removed_segments", removed, "removed_bytes", removedBytes)
	}
	if headMaxt != math.MinInt64 {
		args = append(args, "kept_until", time.UnixMilli(headMaxt).UTC().Format(time.RFC3339Nano))
	}
	logger.Error("WAL was damaged and repaired; the samples written after the damage are lost", args...)
}
