package storage

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/labels"
	promstorage "github.com/prometheus/prometheus/storage"
	"github.com/prometheus/prometheus/storage/remote"
	"github.com/prometheus/prometheus/tsdb"
	"github.com/stretchr/testify/require"
)

// receiver counts remote-write samples by series.
type receiver struct {
	mu      sync.Mutex
	samples map[string]int
}

func (rc *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	req, err := remote.DecodeWriteRequest(r.Body)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, ts := range req.Timeseries {
		var name, series string
		for _, l := range ts.Labels {
			if l.Name == "series" {
				series = l.Value
			}
			if l.Name == "cluster" {
				name = l.Value
			}
		}
		rc.samples[name+"/"+series] += len(ts.Samples)
	}
	w.WriteHeader(http.StatusNoContent)
}

func (rc *receiver) count(key string) int {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	return rc.samples[key]
}

// TestRemoteWriteFromWAL wires remote write as the appliance does: appends
// through the fanout reach the TSDB, the queue tails the TSDB's WAL and
// sends every sample, with the external labels, to the receiver.
func TestRemoteWriteFromWAL(t *testing.T) {
	rc := &receiver{samples: map[string]int{}}
	srv := httptest.NewServer(rc)
	defer srv.Close()

	dir := t.TempDir()
	reg := prometheus.NewRegistry()
	ready := NewReady()
	r := NewRemote(RemoteOptions{Registerer: reg, Local: ready, Dir: dir, FlushDeadline: 5 * time.Second})
	fanout := NewFanout(nil, ready, r)

	db, err := Open(Options{Dir: dir, Retention: time.Hour, Registerer: reg})
	require.NoError(t, err)
	db.SetWriteNotified(r)
	ready.Set(db)

	cfg, err := promconfig.Load(fmt.Sprintf("global:\n  external_labels: {cluster: lab}\nremote_write:\n  - url: %s/api/v1/write\n    queue_config: {batch_send_deadline: 100ms}\n", srv.URL), nil)
	require.NoError(t, err)
	require.NoError(t, r.ApplyConfig(cfg))

	const series, samples = 5, 20
	// The queue sends samples newer than its own start (older WAL data was
	// sent before a restart, or is not this queue's to send).
	start := time.Now().Add(time.Second).UnixMilli()
	for i := range samples {
		app := fanout.AppenderV2(context.Background())
		for s := range series {
			_, err := app.Append(0, labels.FromStrings("__name__", "demo", "series", fmt.Sprint(s)), 0, start+int64(i)*1000, float64(i), nil, nil, promstorage.AOptions{})
			require.NoError(t, err)
		}
		require.NoError(t, app.Commit())
	}
	require.Eventually(t, func() bool {
		for s := range series {
			if rc.count(fmt.Sprintf("lab/%d", s)) < samples {
				return false
			}
		}
		return true
	}, 30*time.Second, 50*time.Millisecond, "every sample of every series arrives, with the external label")
	for s := range series {
		require.Equal(t, samples, rc.count(fmt.Sprintf("lab/%d", s)), "no sample sent twice")
	}

	// Queries through the fanout read the local TSDB.
	q, err := fanout.Querier(0, start+samples*1000)
	require.NoError(t, err)
	set := q.Select(context.Background(), false, nil, labels.MustNewMatcher(labels.MatchEqual, "__name__", "demo"))
	n := 0
	for set.Next() {
		n++
	}
	require.NoError(t, set.Err())
	require.NoError(t, q.Close())
	require.Equal(t, series, n)

	require.NoError(t, r.Close())
	require.NoError(t, r.Close(), "Close is idempotent")
	require.NoError(t, db.Close())
}

// TestFanoutBeforeOpen: before the TSDB is open, appends through the
// fanout fail with ErrNotReady rather than vanishing, on both interfaces.
func TestFanoutBeforeOpen(t *testing.T) {
	ready := NewReady()
	r := NewRemote(RemoteOptions{Local: ready, Dir: t.TempDir()})
	defer r.Close()
	fanout := NewFanout(nil, ready, r)
	app := fanout.Appender(context.Background())
	_, err := app.Append(0, labels.FromStrings("__name__", "x"), 1, 1)
	require.ErrorIs(t, err, tsdb.ErrNotReady)
	require.Error(t, app.Commit())
	_, err = fanout.Querier(0, 1)
	require.ErrorIs(t, err, tsdb.ErrNotReady)
}
