package app_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/oklog/ulid/v2"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/value"
	"github.com/prometheus/prometheus/tsdb/record"
	"github.com/prometheus/prometheus/tsdb/wlog"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/app"
	"github.com/gpuscope/gpuscope/app/apptest"
)

// blockMeta is what the test reads of a block's meta.json.
type blockMeta struct {
	ULID    string
	MinTime int64 // ms, inclusive
	MaxTime int64 // ms, exclusive
	Stats   struct{ NumSamples uint64 }
}

// blocks lists the persisted blocks in dir, oldest first.
func blocks(t *testing.T, dir string) []blockMeta {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var out []blockMeta
	for _, e := range entries {
		if _, err := ulid.ParseStrict(e.Name()); err != nil || !e.IsDir() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name(), "meta.json"))
		if err != nil {
			continue // being written or deleted
		}
		var m blockMeta
		require.NoError(t, json.Unmarshal(b, &m))
		out = append(out, m)
	}
	slices.SortFunc(out, func(a, b blockMeta) int { return int(a.MinTime - b.MinTime) })
	return out
}

// TestCorruptionRepairedAtStart: the real binary writes blocks (10 s
// block range) and WAL, is stopped, and then its newest WAL segment is
// garbled and truncated and the newest block's chunk file garbled. At the
// next start it must become ready, set the block aside in
// <data>/corrupted, repair the WAL, log both with what was lost, count
// them in its metrics, and serve everything else: the other blocks' and
// the WAL's samples before the damage exactly as before, and new scrapes.
func TestCorruptionRepairedAtStart(t *testing.T) {
	t.Parallel()
	// Enough that a head compaction's 10 s fill a WAL segment past the
	// 96 KiB waited for below on their own: the process's own metrics
	// (88 series since the series diet) add little.
	const series = 3000
	target := apptest.NewCounterTarget(t, series)
	dir := t.TempDir()
	data := filepath.Join(dir, "data")
	cfg := writeConfig(t, dir, fmt.Sprintf(`
global:
  scrape_interval: 1s
  evaluation_interval: 1s
cadvisor: {enabled: false}
gpu: {backend: none}
scrape_configs:
  - job_name: corrupt
    static_configs:
      - targets: [%q]
`, target.Addr()))
	args := []apptest.Option{configFile(cfg), with(func(s *app.Settings) { s.MinBlockDuration = 10 * time.Second })}
	testStart := time.Now()
	p := serve(t, data, args...)

	// Two blocks persisted, the older ones with 5 s of the target's
	// samples or more.
	eventually(t, 90*time.Second, "two blocks persisted", func() error {
		bb := blocks(t, data)
		if len(bb) < 2 {
			return fmt.Errorf("%d blocks", len(bb))
		}
		if first, ok := target.ServedAt(1); !ok || time.UnixMilli(bb[len(bb)-2].MaxTime).Sub(first) < 6*time.Second {
			return fmt.Errorf("the blocks before the newest end less than 6 s after the first scrape: %v", bb)
		}
		return nil
	})
	// The WAL is cut into a new segment at every head compaction (each
	// 10 s here): stop when the newest one has something to damage, after
	// reading what the API returns before the stop: the reference for
	// after the damage (what is on disk is this and the scrapes until the
	// stop). If a compaction cut a new segment while the reference was
	// read (a slow machine), wait for that one to fill.
	probes := []string{"00000", fmt.Sprintf("%05d", series-1)}
	var (
		refAt  time.Time
		window time.Duration
		ref    map[string][]model.SamplePair
	)
	eventually(t, 90*time.Second, "newest WAL segment over 96 KiB, and still the newest after the reference was read", func() error {
		seg, size := newestSegment(t, data)
		if size < 96<<10 {
			return fmt.Errorf("%s: %d bytes", seg, size)
		}
		refAt = time.Now()
		window = refAt.Sub(testStart) + 5*time.Second
		ref = rawSamples(t, p, probes, refAt, window)
		if now, _ := newestSegment(t, data); now != seg {
			return fmt.Errorf("WAL segment %s cut while the reference was read", now)
		}
		return nil
	})
	require.NoError(t, p.stop(), "a clean stop (the binary exits 0 after SIGTERM)")
	bb := blocks(t, data)
	require.GreaterOrEqual(t, len(bb), 2, "blocks")

	// Damage: the newest block's chunk data, the newest WAL segment's
	// middle (garbled) and end (cut off, as by a crash mid-write).
	bad := bb[len(bb)-1]
	chunkFile := filepath.Join(data, bad.ULID, "chunks", "000001")
	garbleFile(t, chunkFile, 0.5, 0)
	seg, size := damageableSegment(t, data)
	require.Greater(t, size, int64(64<<10), "newest WAL segment %s: too little in it to damage", seg)
	// Garbled inside the newest of the target's scrapes in the segment
	// that the reference has: what the WAL loses from there on is then
	// sure to hold samples of the reference. (A fraction of the file
	// might fall among the stale markers of scrapes that missed their
	// timeout on a loaded machine, which the reference does not have.)
	scrape, at := newestReferencedScrape(t, seg, series, ref[probes[0]], bb[len(bb)-1].MaxTime)
	cut := max(size*8/10, at+4096)
	garbleBytes(t, seg, at+64, cut)
	t.Logf("damaged block %s [%s, %s) and WAL segment %s (%d bytes: garbled at %d, in the scrape of %s, cut at %d)",
		bad.ULID, time.UnixMilli(bad.MinTime).Format(time.TimeOnly), time.UnixMilli(bad.MaxTime).Format(time.TimeOnly), filepath.Base(seg), size, at+64, scrape.Time().Format(time.TimeOnly), cut)

	p2 := serve(t, data, args...)
	out := p2.out.String()

	// Logged: the block set aside with its range, the WAL repair with what
	// it kept.
	require.Regexp(t, `msg="Damaged block set aside; its samples are not served".*block=`+bad.ULID+`.*moved_to=`+regexp.QuoteMeta(filepath.Join(data, "corrupted", bad.ULID)), out)
	require.Contains(t, out, `from=`+time.UnixMilli(bad.MinTime).UTC().Format(time.RFC3339))
	m := regexp.MustCompile(`msg="WAL was damaged and repaired; the samples written after the damage are lost".*kept_until=(\S+)`).FindStringSubmatch(out)
	require.NotNil(t, m, "WAL repair logged with kept_until")
	keptUntil, err := time.Parse(time.RFC3339Nano, m[1])
	require.NoError(t, err)

	// The block is in corrupted/, and counted.
	require.DirExists(t, filepath.Join(data, "corrupted", bad.ULID))
	require.NoDirExists(t, filepath.Join(data, bad.ULID))
	code, metrics := p2.get("/metrics")
	require.Equal(t, 200, code)
	for _, want := range []string{
		"gpuscope_tsdb_blocks_quarantined_total 1\n",
		"gpuscope_tsdb_corrupted_blocks 1\n",
		"prometheus_tsdb_wal_corruptions_total 1\n",
	} {
		require.Contains(t, metrics, want)
	}

	// Served: every sample outside the damaged block and before the WAL
	// damage, exactly; none from the damaged block. A series' samples are
	// in the WAL in the order of its scrapes, and the repair keeps the
	// records before the damage: so of a series' samples in the head, it
	// keeps those up to its newest one served, every one, and loses the
	// rest (kept_until is the newest of any series).
	got := rawSamples(t, p2, probes, refAt, window)
	lastBlockEnd := bb[len(bb)-1].MaxTime
	for _, s := range probes {
		have := map[model.Time]model.SampleValue{}
		var keptUpTo model.Time
		for _, sp := range got[s] {
			have[sp.Timestamp] = sp.Value
			if int64(sp.Timestamp) >= lastBlockEnd {
				keptUpTo = max(keptUpTo, sp.Timestamp)
			}
		}
		require.False(t, keptUpTo.Time().After(keptUntil), "series %s: served up to %s, after the repair's kept_until %s", s, keptUpTo.Time(), keptUntil)
		var inBlocks, inHead, lost, inBad, recovered int
		for _, sp := range ref[s] {
			ts := int64(sp.Timestamp)
			v, ok := have[sp.Timestamp]
			switch {
			case ts >= bad.MinTime && ts < bad.MaxTime:
				// Not from the block; the WAL may still hold some.
				if ok {
					require.Equal(t, sp.Value, v, "series %s @%v", s, sp.Timestamp)
					recovered++
				} else {
					inBad++
				}
			case ts < lastBlockEnd:
				require.True(t, ok, "series %s: sample %v @%v of an undamaged block not served", s, sp.Value, sp.Timestamp)
				require.Equal(t, sp.Value, v)
				inBlocks++
			case sp.Timestamp <= keptUpTo:
				require.True(t, ok, "series %s: sample %v @%v of the WAL before the damage (the series kept until %v) not served", s, sp.Value, sp.Timestamp, keptUpTo)
				require.Equal(t, sp.Value, v)
				inHead++
			case !ok:
				lost++
			}
		}
		t.Logf("series %s: %d samples from undamaged blocks, %d from the WAL served; %d lost with the damaged block (%d of its range still in the WAL), %d with the WAL's damaged end",
			s, inBlocks, inHead, inBad, recovered, lost)
		require.Positive(t, inBlocks, "series %s: samples from undamaged blocks", s)
		require.Positive(t, inHead, "series %s: samples from the WAL", s)
		require.Positive(t, lost, "series %s: the WAL damage lost nothing: was the damage where the test meant it?", s)
	}

	// And it goes on ingesting.
	k := target.Scrapes()
	eventually(t, 30*time.Second, "new scrapes stored after the repair", func() error {
		// Over the last minute, not at the last scrape: one that timed
		// out on a loaded machine marks the series stale, and what is
		// asked is whether the scrapes since the repair are stored.
		v, err := p2.instant(`count(max_over_time(crash_counter_total[1m]) > ` + strconv.Itoa(k+2) + `)`)
		if err != nil {
			return err
		}
		if len(v) != 1 || int(v[0].Value) != series {
			return fmt.Errorf("series above %d: %v (%d scrapes served; the target: %s)", k+2, v, target.Scrapes(), targetHealth(p2, "corrupt"))
		}
		return nil
	})
}

// targetHealth says how the job's targets fared at their last scrape, for
// a failure's message.
func targetHealth(p *process, job string) string {
	ts, err := p.api().Targets(context.Background())
	if err != nil {
		return err.Error()
	}
	var out []string
	for _, a := range ts.Active {
		if a.ScrapePool == job {
			out = append(out, fmt.Sprintf("%s %s at %s (took %.3gs): %q", a.ScrapeURL, a.Health, a.LastScrape.Format(time.TimeOnly), a.LastScrapeDuration, a.LastError))
		}
	}
	return strings.Join(out, "; ")
}

// garbleFile XORs 16 bytes at the fraction at of path's size and, if cut
// is above zero, truncates it to that fraction.
func garbleFile(t *testing.T, path string, at, cut float64) {
	t.Helper()
	fi, err := os.Stat(path)
	require.NoError(t, err)
	garbleBytes(t, path, int64(float64(fi.Size())*at), int64(float64(fi.Size())*cut))
}

// garbleBytes XORs 16 bytes at offset at of path and, if cut > 0, cuts
// the file to cut bytes.
func garbleBytes(t *testing.T, path string, at, cut int64) {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	for j := at; j < at+16 && j < int64(len(b)); j++ {
		b[j] ^= 0xa5
	}
	if cut > 0 && cut < int64(len(b)) {
		b = b[:cut]
	}
	require.NoError(t, os.WriteFile(path, b, 0o644))
}

// newestReferencedScrape finds, in the WAL segment seg, the newest
// samples record of a whole scrape of the target (at least n samples,
// none a staleness marker) that is not in a block (stamped at or after
// blockEnd) and that the reference has (its timestamp among ref's). It
// returns the scrape's time and the record's offset in seg, read with
// the TSDB's own WAL reader and record decoder.
func newestReferencedScrape(t *testing.T, seg string, n int, ref []model.SamplePair, blockEnd int64) (model.Time, int64) {
	t.Helper()
	inRef := map[int64]bool{}
	for _, sp := range ref {
		inRef[int64(sp.Timestamp)] = true
	}
	f, err := os.Open(seg)
	require.NoError(t, err)
	defer f.Close()
	r := wlog.NewReader(bufio.NewReader(f))
	dec := record.NewDecoder(nil, slog.New(slog.DiscardHandler))
	var (
		found model.Time
		at    int64 = -1
	)
	for {
		start := r.Offset()
		if !r.Next() {
			break
		}
		rec := r.Record()
		if dec.Type(rec) != record.Samples {
			continue
		}
		samples, err := dec.Samples(rec, nil)
		if err != nil || len(samples) < n {
			continue
		}
		ts := samples[0].T
		if ts < blockEnd || !inRef[ts] || slices.ContainsFunc(samples, func(s record.RefSample) bool { return value.IsStaleNaN(s.V) }) {
			continue
		}
		found, at = model.Time(ts), start
	}
	require.NoError(t, r.Err(), "read WAL segment %s", seg)
	require.GreaterOrEqual(t, at, int64(0), "WAL segment %s: no scrape of the target's %d series that the reference has after the blocks", seg, n)
	return found, at
}

// damageableSegment is the newest WAL segment with records in it: a head
// compaction during the stop may have cut a newer one, nearly empty,
// after the wait above. (The repair drops the segments after a damaged
// one: what is in that one is lost with the rest.)
func damageableSegment(t *testing.T, data string) (string, int64) {
	t.Helper()
	segs := walSegments(t, data)
	for i := len(segs) - 1; i >= 0; i-- {
		fi, err := os.Stat(segs[i])
		require.NoError(t, err)
		if fi.Size() >= 64<<10 || i == 0 {
			return segs[i], fi.Size()
		}
	}
	panic("unreachable")
}

// walSegments are the paths of data's WAL segments, oldest first.
func walSegments(t *testing.T, data string) []string {
	t.Helper()
	segs, err := filepath.Glob(filepath.Join(data, "wal", "[0-9]*"))
	require.NoError(t, err)
	require.NotEmpty(t, segs)
	slices.Sort(segs)
	return segs
}

// newestSegment is the path and size of the newest WAL segment in data.
func newestSegment(t *testing.T, data string) (string, int64) {
	t.Helper()
	segs := walSegments(t, data)
	fi, err := os.Stat(segs[len(segs)-1])
	require.NoError(t, err)
	return segs[len(segs)-1], fi.Size()
}
