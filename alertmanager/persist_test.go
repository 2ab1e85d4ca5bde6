package alertmanager

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/alertmanager/nflog"
	"github.com/prometheus/alertmanager/nflog/nflogpb"
	"github.com/prometheus/alertmanager/silence"
	"github.com/prometheus/alertmanager/silence/silencepb"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// BenchmarkSnapshot is the cost of writing the state on every change: a
// silence set (100 silences in all) or a notification logged (100 groups).
// The write's fsync is most of it.
func BenchmarkSnapshot(b *testing.B) {
	dir := b.TempDir()
	sil, err := silence.New(silence.Options{Retention: time.Hour, Metrics: prometheus.NewRegistry()})
	require.NoError(b, err)
	for i := range 100 {
		require.NoError(b, sil.Set(context.Background(), &silencepb.Silence{
			Matchers:  []*silencepb.Matcher{{Name: "alertname", Pattern: fmt.Sprintf("Alert%d", i), Type: silencepb.Matcher_EQUAL}},
			StartsAt:  timestamppb.Now(),
			EndsAt:    timestamppb.New(time.Now().Add(time.Hour)),
			CreatedBy: "bench",
			Comment:   "bench",
		}))
	}
	log, err := nflog.New(nflog.Options{Retention: time.Hour, Metrics: prometheus.NewRegistry()})
	require.NoError(b, err)
	for i := range 100 {
		require.NoError(b, log.Log(&nflogpb.Receiver{GroupName: "ops", Integration: "webhook"},
			fmt.Sprintf(`{}:{alertname="Alert%d", instance="node-%d"}`, i, i), []uint64{uint64(i), uint64(i + 1)}, nil, nil, 0))
	}
	for _, f := range []*stateFile{
		{path: filepath.Join(dir, "silences"), snapshot: sil.Snapshot},
		{path: filepath.Join(dir, "nflog"), snapshot: log.Snapshot},
	} {
		b.Run(filepath.Base(f.path), func(b *testing.B) {
			var size int64
			for b.Loop() {
				if size, err = f.write(); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(size), "bytes")
		})
	}
}
