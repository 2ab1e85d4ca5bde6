package gpu

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/workload"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestGoldenExposition pins the full /metrics/gpu exposition of a mock
// two-GPU machine: metric names, HELP, TYPE and label sets are the
// contract dashboards and alert rules depend on. GPU 0 is a Hopper with
// GPM and a container; GPU 1 has no GPM and no memory temperature sensor.
// Regenerate with: go test ./gpu/ -run TestGoldenExposition -update
func TestGoldenExposition(t *testing.T) {
	for _, tc := range []struct {
		golden    string
		configure func(*Config)
	}{
		{"nvml_default.golden", func(*Config) {}},
		{"nvml_all_families.golden", func(c *Config) {
			c.HostnameLabel = HostnameLabelLower
			c.Families = Families{Profiling: true, Processes: true, ECC: true, RetiredPages: true, Violations: true, ClockEvents: true, NVLinkErrors: true, PerProcess: true}
		}},
	} {
		t.Run(tc.golden, func(t *testing.T) {
			m := newMockMachine(t, 2)
			m.gpm[1] = false
			proc := t.TempDir()
			writeProc(t, proc, 4242, "4:cpu,cpuacct:/system.slice/docker-0123abcd.scope\n0::/system.slice/docker-0123abcd.scope\n")
			writeProcInfo(t, proc, 4242, 1000, "python3", "python3\x00train.py\x00")
			m.procs[0] = []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 1000 << 20}}
			clock := newFakeClock()
			now := uint64(clock.Now().UnixMicro()) // driver timestamps are wall-clock µs
			m.utils[0] = []nvml.ProcessUtilizationSample{{Pid: 4242, TimeStamp: now - 5e6, SmUtil: 48}}
			m.devs[1].GetPowerUsageFunc = func() (uint32, nvml.Return) { return 0, nvml.ERROR_UNKNOWN }

			o := mockOptions(m, clock)
			o.ProcRoot = proc
			o.ContainerLookup = func(id string) (workload.Metadata, bool) {
				return workload.Metadata{Name: "trainer", Image: "nvcr.io/nvidia/pytorch:24.01-py3"}, true
			}
			tc.configure(&o.Config)
			c, reg := testCollector(t, o)
			c.collectOnce(bg)
			m.mu.Lock()
			m.nvlinkKiB[0] += 1234567
			m.utils[0] = append(m.utils[0], nvml.ProcessUtilizationSample{Pid: 4242, TimeStamp: now + 5e6, SmUtil: 52})
			m.mu.Unlock()
			clock.Advance(10 * time.Second)
			c.collectOnce(bg)

			got := exposition(t, reg)
			path := filepath.Join("testdata", tc.golden)
			if *update {
				require.NoError(t, os.WriteFile(path, got, 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err)
			require.Equal(t, string(want), string(got))
		})
	}
}

// exposition renders the registry in the text format, leaving out the one
// family whose value is wall time.
func exposition(t *testing.T, reg prometheus.Gatherer) []byte {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var buf bytes.Buffer
	enc := expfmt.NewEncoder(&buf, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, mf := range mfs {
		if mf.GetName() == "gpuscope_gpu_collector_last_cycle_duration_seconds" {
			continue
		}
		require.NoError(t, enc.Encode(mf))
	}
	return buf.Bytes()
}
