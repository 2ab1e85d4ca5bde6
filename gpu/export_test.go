package gpu

import (
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

// This file exports what the external tests of this package (package
// gpu_test, which may import gpu/sim) need of its internals.

// FieldSpec is a field's row of fields.go.
type FieldSpec struct {
	Name, Help string
	Type       prometheus.ValueType
}

// FieldSpecs are the rows of fields.go, by Field.
func FieldSpecs() []FieldSpec {
	out := make([]FieldSpec, numFields)
	for f := Field(0); f < numFields; f++ {
		out[f] = FieldSpec{Name: fields[f].name, Help: fields[f].help, Type: fields[f].typ}
	}
	return out
}

// NVMLContractSource gathers what the NVML backend publishes of go-nvml's
// mock, fams on: the two GPUs of the golden test with a container, and an
// XID.
func NVMLContractSource(t *testing.T, fams Families) []*dto.MetricFamily {
	t.Helper()
	m := newMockMachine(t, 2)
	proc := t.TempDir()
	writeProc(t, proc, 4242, "0::/system.slice/docker-0123abcd.scope\n")
	m.procs[0] = []nvml.ProcessInfo{{Pid: 4242, UsedGpuMemory: 1000 << 20}}
	m.utils[0] = []nvml.ProcessUtilizationSample{{Pid: 4242, TimeStamp: 5, SmUtil: 48}}
	clock := newFakeClock()
	o := mockOptions(m, clock)
	o.ProcRoot = proc
	o.Config.Families = fams
	c, reg := testCollector(t, o)
	c.collectOnce(bg)
	m.events <- nvml.EventData{Device: m.devs[0], EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	clock.Advance(10 * time.Second)
	require.Eventually(t, func() bool {
		c.collectOnce(bg)
		v, ok := lookup(t, reg, "gpuscope_gpu_xid_errors_total", map[string]string{"gpu": "0", "err_code": "79"})
		return ok && v == 1
	}, 5*time.Second, 20*time.Millisecond, "the mock's XID event reaches the collector")
	mfs, err := reg.Gather()
	require.NoError(t, err)
	return mfs
}
