package gpu

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/stretchr/testify/require"
)

// TestNVMLSickGPUDoesNotStallTheOthers is R2 of the second review: a GPU
// whose identification or XID registration blocks in the driver (GSP
// timeouts block tens of seconds per call) used to block the cycle
// goroutine, so every GPU lost its series. Both now run in the GPU's own
// read, under the same deadline: the other GPU keeps publishing, the
// collector stays up, the blocked call is not piled up on, and the GPU is
// read once the call returns.
func TestNVMLSickGPUDoesNotStallTheOthers(t *testing.T) {
	for _, tc := range []struct {
		name  string
		block func(m *mockMachine, wait func())
	}{
		{"identification blocks", func(m *mockMachine, wait func()) {
			uuid := m.devs[1].GetUUIDFunc
			m.devs[1].GetUUIDFunc = func() (string, nvml.Return) { wait(); return uuid() }
		}},
		{"XID registration blocks", func(m *mockMachine, wait func()) {
			m.devs[1].RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { wait(); return nvml.SUCCESS }
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newMockMachine(t, 2)
			release := make(chan struct{})
			var calls atomic.Int32
			tc.block(m, func() { calls.Add(1); <-release })
			cfg := DefaultConfig()
			cfg.Backend = BackendNVML
			const interval = 50 * time.Millisecond
			c, err := New(Options{Config: cfg, NVML: m.srv, Interval: interval, Hostname: "h", ProcRoot: t.TempDir(), KernelLog: "-"})
			require.NoError(t, err)
			c.backend.(*nvmlBackend).eventWait = 10 * time.Millisecond
			reg := newRegistry(t, c)
			ctx, cancel := context.WithCancel(bg)
			done := make(chan error, 1)
			go func() { done <- c.Run(ctx) }()
			released := false
			defer func() {
				cancel()
				if !released {
					close(release)
				}
				require.Eventually(t, func() bool { return !c.backend.(*nvmlBackend).busyAny() }, 5*time.Second, time.Millisecond)
			}()

			gpu0 := map[string]string{"gpu": "0"}
			require.Eventually(t, func() bool {
				v, _ := lookup(t, reg, "gpuscope_gpu_collector_errors_total", map[string]string{"gpu": "1", "field": "timeout"})
				return v >= 3
			}, 5*time.Second, time.Millisecond, "GPU 1 is counted as hung, cycle after cycle")
			first := mustLookup(t, reg, "gpuscope_gpu_last_sample_timestamp_seconds", gpu0)
			require.Eventually(t, func() bool {
				return mustLookup(t, reg, "gpuscope_gpu_last_sample_timestamp_seconds", gpu0) > first
			}, 5*time.Second, time.Millisecond, "GPU 0 is read meanwhile")
			mustLookup(t, reg, "DCGM_FI_DEV_GPU_TEMP", gpu0)
			require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_collector_up", nil))
			cycles := mustLookup(t, reg, "gpuscope_gpu_collector_cycles_total", nil)
			require.Eventually(t, func() bool {
				return mustLookup(t, reg, "gpuscope_gpu_collector_cycles_total", nil) >= cycles+3
			}, 5*time.Second, time.Millisecond, "cycles complete while the call blocks")
			require.Equal(t, int32(1), calls.Load(), "no second call piles up on the blocked one")

			close(release)
			released = true
			require.Eventually(t, func() bool {
				_, ok := lookup(t, reg, "DCGM_FI_DEV_GPU_TEMP", map[string]string{"gpu": "1"})
				return ok
			}, 5*time.Second, time.Millisecond, "GPU 1 is read once the call returns")
			cancel()
			require.NoError(t, <-done)
		})
	}
}

// eventSets is a mock driver's event sets: each has its own event queue,
// can be broken (every Wait answers GPU_IS_LOST, as NVML's set-wide Wait
// does once a GPU in it is lost), and records which GPUs registered.
type eventSets struct {
	mu   sync.Mutex
	sets []*mockEventSet
}

type mockEventSet struct {
	*mock.EventSet
	events chan nvml.EventData
	broken atomic.Bool
	panics atomic.Bool // the next Wait panics, as a misbehaving binding can
	freed  atomic.Bool
	mu     sync.Mutex
	gpus   []int
}

func (e *eventSets) install(m *mockMachine) {
	m.srv.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		st := &mockEventSet{events: make(chan nvml.EventData, 8)}
		st.EventSet = &mock.EventSet{
			WaitFunc: func(timeoutMs uint32) (nvml.EventData, nvml.Return) {
				if st.broken.Load() {
					return nvml.EventData{}, nvml.ERROR_GPU_IS_LOST
				}
				if st.panics.Load() {
					panic("binding panics")
				}
				timer := time.NewTimer(time.Duration(timeoutMs) * time.Millisecond)
				defer timer.Stop()
				select {
				case ed := <-st.events:
					return ed, nvml.SUCCESS
				case <-timer.C:
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
			},
			FreeFunc: func() nvml.Return { st.freed.Store(true); return nvml.SUCCESS },
		}
		e.mu.Lock()
		e.sets = append(e.sets, st)
		e.mu.Unlock()
		return st, nvml.SUCCESS
	}
	for i, d := range m.devs {
		d.RegisterEventsFunc = func(_ uint64, es nvml.EventSet) nvml.Return {
			st := es.(*mockEventSet)
			st.mu.Lock()
			st.gpus = append(st.gpus, i)
			st.mu.Unlock()
			return nvml.SUCCESS
		}
	}
}

func (e *eventSets) get(i int) *mockEventSet {
	e.mu.Lock()
	defer e.mu.Unlock()
	if i >= len(e.sets) {
		return nil
	}
	return e.sets[i]
}

func (s *mockEventSet) registered() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.gpus...)
}

// TestNVMLEventSetRebuiltAfterGPULost is R3 of the second review: once a
// GPU is lost, NVML's Wait can fail for the whole set, and the healthy
// GPUs' XIDs were lost until a restart. After waitErrLimit failed waits
// the set is rebuilt without the lost GPU; a healthy GPU's XID arrives
// through the new set, and the lost GPU joins it when it answers again.
func TestNVMLEventSetRebuiltAfterGPULost(t *testing.T) {
	m := newMockMachine(t, 2)
	var sets eventSets
	sets.install(m)
	var lost atomic.Bool
	clock := m.devs[1].GetClockInfoFunc
	m.devs[1].GetClockInfoFunc = func(ct nvml.ClockType) (uint32, nvml.Return) {
		if lost.Load() {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		return clock(ct)
	}
	var logs syncBuffer
	o := mockOptions(m, newFakeClock())
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c, reg := testCollector(t, o)
	c.backend.(*nvmlBackend).eventErrPause = time.Millisecond
	c.collectOnce(bg)
	first := sets.get(0)
	require.ElementsMatch(t, []int{0, 1}, first.registered())

	// GPU 1 falls off the bus: its reads fail, and so does every Wait.
	lost.Store(true)
	c.collectOnce(bg)
	first.broken.Store(true)
	require.Eventually(t, func() bool { return c.backend.(*nvmlBackend).eventsFailed.Load() }, 5*time.Second, time.Millisecond,
		"the event loop gives up on the set")
	c.collectOnce(bg)
	second := sets.get(1)
	require.NotNil(t, second, "a new set")
	require.True(t, first.freed.Load(), "the old set is freed")
	require.Equal(t, []int{0}, second.registered(), "without the lost GPU")

	// GPU 0's XID arrives through the new set.
	second.events <- nvml.EventData{Device: m.devs[0], EventType: nvml.EventTypeXidCriticalError, EventData: 48}
	require.Eventually(t, func() bool {
		c.collectOnce(bg)
		v, ok := lookup(t, reg, "gpuscope_gpu_xid_errors_total", map[string]string{"gpu": "0", "err_code": "48"})
		return ok && v == 1
	}, 5*time.Second, 10*time.Millisecond)
	require.GreaterOrEqual(t, mustLookup(t, reg, "gpuscope_gpu_collector_errors_total", map[string]string{"gpu": "", "field": "DCGM_FI_DEV_XID_ERRORS"}), float64(defaultWaitErrLimit))
	// The lost GPU keeps its XID series.
	mustLookup(t, reg, "DCGM_FI_DEV_XID_ERRORS", map[string]string{"gpu": "1"})
	require.Equal(t, 1, strings.Count(logs.String(), "Rebuilding the XID event set"), logs.String())

	// Back on the bus: it joins the set at the next cycle.
	lost.Store(false)
	c.collectOnce(bg)
	c.collectOnce(bg)
	require.Equal(t, []int{0, 1}, second.registered())
	require.Nil(t, sets.get(2), "no further set")
}

// TestNVMLEventLoopPanicRebuilds: a panic in the event loop (a misbehaving
// binding) is recovered, and the next cycle builds a new set.
func TestNVMLEventLoopPanicRebuilds(t *testing.T) {
	m := newMockMachine(t, 1)
	var sets eventSets
	sets.install(m)
	c, reg := testCollector(t, mockOptions(m, newFakeClock()))
	c.collectOnce(bg)
	first := sets.get(0)
	first.panics.Store(true)
	require.Eventually(t, func() bool { return c.backend.(*nvmlBackend).eventsFailed.Load() }, 5*time.Second, time.Millisecond)
	c.collectOnce(bg)
	second := sets.get(1)
	require.NotNil(t, second)
	second.events <- nvml.EventData{Device: m.devs[0], EventType: nvml.EventTypeXidCriticalError, EventData: 31}
	require.Eventually(t, func() bool {
		c.collectOnce(bg)
		_, ok := lookup(t, reg, "gpuscope_gpu_xid_errors_total", map[string]string{"gpu": "0", "err_code": "31"})
		return ok
	}, 5*time.Second, 10*time.Millisecond)
}

// TestNVMLGPUCountChanges is R5 of the second review: GPUs were tracked by
// NVML index only, so after a hot-remove NVML's re-indexed GPUs kept their
// old handles and gpu labels. When the count changes, each GPU checks that
// its index still names it (UUID); one that moved is identified afresh,
// and its XID record follows its UUID.
func TestNVMLGPUCountChanges(t *testing.T) {
	m := newMockMachine(t, 3)
	var removed atomic.Bool
	m.srv.DeviceGetCountFunc = func() (int, nvml.Return) {
		if removed.Load() {
			return 2, nvml.SUCCESS
		}
		return 3, nvml.SUCCESS
	}
	m.srv.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		idx := []int{0, 1, 2}
		if removed.Load() {
			idx = []int{0, 2} // GPU 1 was removed; the last GPU is index 1 now
		}
		if i < 0 || i >= len(idx) {
			return nil, nvml.ERROR_INVALID_ARGUMENT
		}
		return m.devs[idx[i]], nvml.SUCCESS
	}
	c, reg := testCollector(t, mockOptions(m, newFakeClock()))
	c.collectOnce(bg)
	m.events <- nvml.EventData{Device: m.devs[2], EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	require.Eventually(t, func() bool {
		c.collectOnce(bg)
		_, ok := lookup(t, reg, "gpuscope_gpu_xid_errors_total", map[string]string{"gpu": "2", "err_code": "79"})
		return ok
	}, 5*time.Second, 10*time.Millisecond)

	removed.Store(true)
	c.collectOnce(bg) // the count changes: GPU 1's index names another GPU now
	c.collectOnce(bg) // which is identified afresh
	uuid := func(i int) string { return "GPU-00000000-0000-4000-8000-00000000000" + string(rune('0'+i)) }
	temps := gather(t, reg, "DCGM_FI_DEV_GPU_TEMP")
	require.Len(t, temps, 2)
	got := map[string]string{}
	for _, s := range temps {
		got[s.labels["gpu"]] = s.labels["UUID"]
		require.Equal(t, "nvidia"+s.labels["gpu"], s.labels["device"])
	}
	require.Equal(t, map[string]string{"0": uuid(0), "1": uuid(2)}, got, "gpu labels as NVML indexes them now")
	require.Equal(t, 42.0, mustLookup(t, reg, "DCGM_FI_DEV_GPU_TEMP", map[string]string{"gpu": "1"}), "read from the GPU that is there")
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_xid_errors_total", map[string]string{"gpu": "1", "UUID": uuid(2), "err_code": "79"}),
		"the XID record follows the UUID")
	require.Empty(t, gather(t, reg, "gpuscope_gpu_collector_errors_total"))

	// Events still reach the GPU under its new index.
	m.events <- nvml.EventData{Device: m.devs[2], EventType: nvml.EventTypeXidCriticalError, EventData: 79}
	require.Eventually(t, func() bool {
		c.collectOnce(bg)
		v, _ := lookup(t, reg, "gpuscope_gpu_xid_errors_total", map[string]string{"gpu": "1", "err_code": "79"})
		return v == 2
	}, 5*time.Second, 10*time.Millisecond)
}

// TestNVMLXIDRegistrationDenied is R10 of the second review: an XID
// registration answering NO_PERMISSION was an error every cycle. It is
// denied, logged once, and not tried again.
func TestNVMLXIDRegistrationDenied(t *testing.T) {
	m := newMockMachine(t, 2)
	var calls atomic.Int32
	m.devs[1].RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return {
		calls.Add(1)
		return nvml.ERROR_NO_PERMISSION
	}
	var logs syncBuffer
	o := mockOptions(m, newFakeClock())
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c, reg := testCollector(t, o)
	for range 2 * retryEvery {
		c.collectOnce(bg)
	}
	require.Empty(t, gather(t, reg, "gpuscope_gpu_collector_errors_total"))
	require.Equal(t, 0.0, mustLookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": "1", "field": "DCGM_FI_DEV_XID_ERRORS"}))
	require.Equal(t, 1.0, mustLookup(t, reg, "gpuscope_gpu_field_supported", map[string]string{"gpu": "0", "field": "DCGM_FI_DEV_XID_ERRORS"}))
	require.Equal(t, int32(1), calls.Load())
	require.Equal(t, 1, strings.Count(logs.String(), "field=DCGM_FI_DEV_XID_ERRORS"), logs.String())
	require.NotContains(t, logs.String(), "level=WARN")
}
