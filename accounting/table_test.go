package accounting

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func sampleRuns(now time.Time) []Run {
	kwh, cost := 0.6, 0.18
	end := now.Add(-time.Hour)
	return []Run{
		{Workload: "llama-train", Runtime: "docker", User: "bob", Image: "trainer:1", Instance: "gpu-03", ID: "/docker/aaa",
			Start: now.Add(-2 * time.Hour), Running: true, DurationSeconds: 7200, GPUs: []string{"0", "1"}, GPUHours: 4,
			SMShareAvg: 0.8, SMShareMax: 0.95, GPUMemoryMaxBytes: 10 << 30, EnergyKWh: &kwh, Cost: &cost, Currency: "EUR",
			CPUCoreSeconds: 3600, MemoryMaxBytes: 2 << 30, Alerts: []string{"ContainerCPUSaturated"}, Bottleneck: "input-bound"},
		{Workload: "job 42\nevil", Runtime: "slurm", SlurmJobID: "42", SlurmUser: "alice", Instance: "gpu-04", ID: "/slurm/uid_1000/job_42/step_0",
			Start: now.Add(-3 * time.Hour), End: &end, DurationSeconds: 7200, OOMKills: 1, XIDErrors: 2},
	}
}

// TestWriteRuns: the table names each run and its figures, keeps a
// hostile name on its row, shows cost only when priced; CSV and JSON
// carry the same runs.
func TestWriteRuns(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	runs := sampleRuns(now)
	var b bytes.Buffer
	require.NoError(t, WriteTable(&b, runs, now))
	lines := strings.Split(strings.TrimSpace(b.String()), "\n")
	require.Len(t, lines, 3, "a header and one row per run, the newline in a name notwithstanding:\n%s", b.String())
	require.Regexp(t, `^WORKLOAD\s+RUNTIME\s+USER\s+IMAGE/JOB\s+NODE\s+STARTED\s+DURATION\s+GPUS\s+GPU-H\s+SM AVG/MAX\s+GPU MEM\s+KWH\s+COST\s+CPU-S`, lines[0])
	require.Regexp(t, `^llama-train\s+docker\s+bob\s+trainer:1\s+gpu-03\s+2h00m ago\s+2h00m \(running\)\s+0,1\s+4\.00\s+80%/95%\s+10\.0 GiB\s+0\.600\s+0\.18 EUR\s+3600\s+2\.0 GiB\s+0\s+0\s+ContainerCPUSaturated\s+input-bound$`, lines[1])
	require.Regexp(t, `^job 42 evil\s+slurm\s+-\s+job 42 \(alice\)\s+gpu-04\s+3h00m ago\s+2h00m\s+-\s+0\.00\s+0%/0%\s+-\s+-\s+-\s+0\s+-\s+1\s+2\s+-\s+-$`, lines[2])

	b.Reset()
	require.NoError(t, WriteTable(&b, runs[1:], now))
	require.NotContains(t, b.String(), "COST", "no price, no cost column")

	b.Reset()
	require.NoError(t, WriteTable(&b, nil, now))
	require.Equal(t, "No workloads in this range.\n", b.String())

	b.Reset()
	require.NoError(t, WriteCSV(&b, runs))
	records, err := csv.NewReader(&b).ReadAll()
	require.NoError(t, err)
	require.Len(t, records, 3)
	require.Equal(t, "workload", records[0][0])
	require.Equal(t, "job 42\nevil", records[2][0], "CSV quotes what it must and keeps the name")
	require.Equal(t, "0.6", records[1][15])

	b.Reset()
	require.NoError(t, WriteJSON(&b, runs))
	var back []Run
	require.NoError(t, json.Unmarshal(b.Bytes(), &back))
	require.Equal(t, runs[0].Workload, back[0].Workload)
	require.Equal(t, *runs[0].EnergyKWh, *back[0].EnergyKWh)
	b.Reset()
	require.NoError(t, WriteJSON(&b, nil))
	require.Equal(t, "[]\n", b.String())
}
