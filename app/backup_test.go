package app_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-openapi/strfmt"
	"github.com/prometheus/alertmanager/api/v2/models"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/prometheus/prometheus/tsdb/chunkenc"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/app/apptest"
	"github.com/gpuscope/gpuscope/backup"
)

// TestBackupUnderLoadAndRestore is `gpuscope backup` and `gpuscope
// restore` end to end: a demo appliance with a silence and run reports is
// backed up while a storm of range queries runs against it and it keeps
// scraping; the backup is restored into an empty data directory and
// another appliance starts on it. The restored one has every sample the
// first had stored before the backup was asked for, no sample the first
// never had, the silence as it was, and the same run report over the
// range whose samples both hold.
//
// What both hold is found from the samples themselves, not from a clock:
// a sample committed after the snapshot may carry an older timestamp
// (cAdvisor stamps its own, and scrape loops commit independently), so
// the report is compared up to the oldest sample the first appliance
// has and the backup lacks.
func TestBackupUnderLoadAndRestore(t *testing.T) {
	t.Parallel()
	cfg := writeConfig(t, t.TempDir(), "global:\n  scrape_interval: 5s\n")
	p := serve(t, "", demo, configFile(cfg))
	// From a minute before the appliance: the report needs a range.
	start := time.Now().Add(-time.Minute).Truncate(time.Second)

	eventually(t, 2*time.Minute, "a run report with GPU-hours", func() error {
		for _, r := range p.Client.Report(start, time.Now()) {
			if r.GPUHours > 0 && r.EnergyKWh != nil && *r.EnergyKWh > 0 {
				return nil
			}
		}
		return fmt.Errorf("no run holds GPU-hours and energy yet")
	})
	silence := postSilence(t, p.URL, models.PostableSilence{Silence: models.Silence{
		Matchers:  models.Matchers{{Name: ptr("alertname"), Value: ptr("GPUTemperatureHigh"), IsRegex: ptr(false), IsEqual: ptr(true)}},
		StartsAt:  ptr(strfmt.DateTime(time.Now())),
		EndsAt:    ptr(strfmt.DateTime(time.Now().Add(time.Hour))),
		CreatedBy: ptr("backup test"),
		Comment:   ptr("kept through a backup"),
	}})

	// A backup under load. The report is compared up to the oldest sample
	// committed after the snapshot (below), which a backup taken soon
	// after the start can place before the accounting rules' first
	// samples: the state was not ready then, and another backup is taken
	// until its samples hold a report with GPU-hours.
	var (
		dest          string
		m             *backup.Manifest
		before, after map[string]map[int64]model.SampleValue
	)
	for attempt := 1; ; attempt++ {
		before = everySample(t, p.Client, time.Now())
		dest = filepath.Join(t.TempDir(), "backup")
		var queries int64
		m, queries = backupUnderStorm(t, p, start, dest)
		t.Logf("attempt %d: %s; %d range queries beside it", attempt, backup.Describe(dest, m), queries)
		after = everySample(t, p.Client, time.Now())
		oldest := m.TSDB.MaxTime + 1
		for _, d := range differing(after, backupSamples(t, dest), m.TSDB.MaxTime) {
			if !d.present {
				oldest = min(oldest, d.ts)
			}
		}
		var held float64
		for _, r := range p.Client.Report(start, time.UnixMilli(oldest-1).Truncate(time.Second)) {
			held += r.GPUHours
		}
		if held > 0 {
			break
		}
		require.Less(t, attempt, 10, "no backup whose samples hold a run report with GPU-hours")
	}
	require.Contains(t, p.out.String(), `msg="Backup taken"`)

	into := filepath.Join(t.TempDir(), "restored")
	_, err := backup.Restore(dest, into)
	require.NoError(t, err)
	// The restored appliance runs with the first one's settings (the run
	// report's integrals use the demo's rule intervals); its demo finds
	// the first one's cgroups and leaves them to it. It has the samples
	// the backup brought, and its own from its start on, after the
	// backup's newest.
	q := serve(t, into, demo, configFile(cfg))
	restored := everySample(t, q.Client, time.UnixMilli(m.TSDB.MaxTime))

	lost := differing(before, restored, math.MaxInt64)
	for _, d := range lost[:min(len(lost), 4)] {
		t.Errorf("lost: %s", d)
	}
	oldestLate := m.TSDB.MaxTime + 1
	var late int
	for _, d := range differing(after, restored, m.TSDB.MaxTime) {
		if !d.present {
			late++
			oldestLate = min(oldestLate, d.ts)
		} else {
			t.Errorf("changed: %s", d)
		}
	}
	invented := differing(restored, after, math.MaxInt64)
	for _, d := range invented[:min(len(invented), 4)] {
		t.Errorf("invented: %s (not in the first appliance)", d)
	}
	require.Empty(t, lost, "samples stored before the backup and missing from it")
	require.Empty(t, invented, "samples in the restored appliance the first never had")
	t.Logf("%d series and %d samples stored before the backup, all restored; %d committed after the snapshot with timestamps before its newest sample, the oldest at %s",
		len(before), count(before), late, time.UnixMilli(oldestLate).UTC().Format(time.RFC3339Nano))

	// The silence, as it was.
	got := silences(t, q.URL)
	require.Contains(t, got, silence)
	want := silences(t, p.URL)[silence]
	require.Equal(t, want.Matchers, got[silence].Matchers)
	require.Equal(t, want.StartsAt.String(), got[silence].StartsAt.String())
	require.Equal(t, want.EndsAt.String(), got[silence].EndsAt.String())
	require.Equal(t, *want.CreatedBy, *got[silence].CreatedBy)
	require.Equal(t, *want.Comment, *got[silence].Comment)
	require.Equal(t, "active", *got[silence].Status.State)

	// The run report over the range both hold the same samples of.
	end := time.UnixMilli(oldestLate - 1).Truncate(time.Second)
	require.True(t, end.After(start), "a range both hold")
	wantRuns, gotRuns := runsByID(p.Client.Report(start, end)), runsByID(q.Client.Report(start, end))
	var gpuHours float64
	for id, w := range wantRuns {
		g, ok := gotRuns[id]
		require.True(t, ok, "run %s (%s) restored", id, w.Workload)
		require.Equal(t, w.Workload, g.Workload)
		require.Equal(t, w.GPUs, g.GPUs, w.Workload)
		require.Equal(t, w.GPUHours, g.GPUHours, w.Workload)
		require.Equal(t, w.EnergyKWh, g.EnergyKWh, w.Workload)
		require.Equal(t, w.CPUCoreSeconds, g.CPUCoreSeconds, w.Workload)
		require.Equal(t, w.XIDErrors, g.XIDErrors, w.Workload)
		gpuHours += w.GPUHours
	}
	require.Len(t, gotRuns, len(wantRuns), "no run the first appliance's report lacks")
	require.Positive(t, gpuHours, "the report compared holds GPU-hours")
	t.Logf("run report to %s: %d runs, %.4f GPU-hours, equal in both", end.UTC().Format(time.RFC3339), len(wantRuns), gpuHours)
}

// backupUnderStorm takes a backup of p into dest while four clients ask
// for range queries over every series; it returns the manifest and how
// many queries were answered beside it.
func backupUnderStorm(t *testing.T, p *process, start time.Time, dest string) (*backup.Manifest, int64) {
	t.Helper()
	var (
		stop    atomic.Bool
		wg      sync.WaitGroup
		queries atomic.Int64
	)
	for range 4 {
		wg.Go(func() {
			for !stop.Load() {
				q := url.Values{"query": {`sum by (__name__) (rate({__name__=~".+"}[1m]))`}, "start": {strconv.FormatInt(start.Unix(), 10)},
					"end": {strconv.FormatInt(time.Now().Unix(), 10)}, "step": {"1"}}
				resp, err := http.PostForm(p.URL+"/api/v1/query_range", q)
				if err == nil {
					resp.Body.Close()
					queries.Add(1)
				}
			}
		})
	}
	dir, m, err := backup.Request(t.Context(), p.DataDir, dest)
	stop.Store(true)
	wg.Wait()
	require.NoError(t, err)
	require.Equal(t, dest, dir)
	return m, queries.Load()
}

// backupSamples is every sample of a backup's TSDB, read from its blocks
// (a snapshot has no WAL).
func backupSamples(t *testing.T, dir string) map[string]map[int64]model.SampleValue {
	t.Helper()
	out := map[string]map[int64]model.SampleValue{}
	blocks, err := os.ReadDir(filepath.Join(dir, "tsdb"))
	require.NoError(t, err)
	for _, d := range blocks {
		if !d.IsDir() {
			continue
		}
		b, err := tsdb.OpenBlock(promslog.NewNopLogger(), filepath.Join(dir, "tsdb", d.Name()), nil, nil)
		require.NoError(t, err)
		q, err := tsdb.NewBlockQuerier(b, math.MinInt64, math.MaxInt64)
		require.NoError(t, err)
		ss := q.Select(t.Context(), false, nil, labels.MustNewMatcher(labels.MatchRegexp, labels.MetricName, ".+"))
		for ss.Next() {
			s := ss.At()
			metric := model.Metric{}
			s.Labels().Range(func(l labels.Label) { metric[model.LabelName(l.Name)] = model.LabelValue(l.Value) })
			key := metric.String() // as everySample names it
			if out[key] == nil {
				out[key] = map[int64]model.SampleValue{}
			}
			it := s.Iterator(nil)
			for it.Next() == chunkenc.ValFloat {
				ts, v := it.At()
				out[key][ts] = model.SampleValue(v)
			}
			require.NoError(t, it.Err())
		}
		require.NoError(t, ss.Err())
		require.NoError(t, q.Close())
		require.NoError(t, b.Close())
	}
	return out
}

// sampleDiff is a sample of one store that another lacks (present
// false) or holds with another value.
type sampleDiff struct {
	series    string
	ts        int64
	want, got model.SampleValue
	present   bool
}

func (d sampleDiff) String() string {
	return fmt.Sprintf("%s at %d (%v): the other has %v, %v", d.series, d.ts, d.want, d.got, d.present)
}

// differing lists the samples of have, at timestamps up to maxTime,
// that got lacks or holds with another value.
func differing(have, got map[string]map[int64]model.SampleValue, maxTime int64) []sampleDiff {
	var out []sampleDiff
	for series, samples := range have {
		for ts, v := range samples {
			if ts > maxTime {
				continue
			}
			if g, ok := got[series][ts]; !ok || !sameValue(g, v) {
				out = append(out, sampleDiff{series, ts, v, g, ok})
			}
		}
	}
	return out
}

// everySample is every sample an appliance holds up to at, by series and
// timestamp (ms).
func everySample(t *testing.T, c apptest.Client, at time.Time) map[string]map[int64]model.SampleValue {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, _, _, err := c.API().Query(ctx, `{__name__=~".+"}[1h]`, at)
	require.NoError(t, err)
	out := map[string]map[int64]model.SampleValue{}
	for _, s := range v.(model.Matrix) {
		m := map[int64]model.SampleValue{}
		for _, p := range s.Values {
			m[int64(p.Timestamp)] = p.Value
		}
		out[s.Metric.String()] = m
	}
	return out
}

func count(samples map[string]map[int64]model.SampleValue) int {
	n := 0
	for _, s := range samples {
		n += len(s)
	}
	return n
}

// sameValue is equality with NaN equal to NaN (a rule's 0/0).
func sameValue(a, b model.SampleValue) bool { return a.Equal(b) }

func runsByID(runs []apptest.ReportRun) map[string]apptest.ReportRun {
	out := map[string]apptest.ReportRun{}
	for _, r := range runs {
		out[r.ID] = r
	}
	return out
}

func postSilence(t *testing.T, base string, s models.PostableSilence) string {
	t.Helper()
	body, err := json.Marshal(s)
	require.NoError(t, err)
	resp, err := http.Post(base+"/api/v2/silences", "application/json", bytes.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	var out struct {
		SilenceID string `json:"silenceID"`
	}
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	require.NotEmpty(t, out.SilenceID)
	return out.SilenceID
}

func silences(t *testing.T, base string) map[string]*models.GettableSilence {
	t.Helper()
	resp, err := http.Get(base + "/api/v2/silences")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	var list models.GettableSilences
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&list))
	out := map[string]*models.GettableSilence{}
	for _, s := range list {
		out[*s.ID] = s
	}
	return out
}

func ptr[T any](v T) *T { return &v }
