package gpu

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu/internal/gputest"
)

// TestNVMLGPULostAndBack: a GPU whose reads answer GPU_IS_LOST has its
// series dropped (even those read before the loss showed) except its XID
// series (the driver reported XID 79), one device error per cycle, and is
// read again when it answers again.
func TestNVMLGPULostAndBack(t *testing.T) {
	m := newMockMachine(t, 2)
	var logs bytes.Buffer
	o := mockOptions(m, newFakeClock())
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c, _ := testCollector(t, o)
	lost := false
	// The loss shows only at the power reading, after the clocks and the
	// temperature were read.
	power := m.devs[1].GetPowerUsageFunc
	m.devs[1].GetPowerUsageFunc = func() (uint32, nvml.Return) {
		if lost {
			return 0, nvml.ERROR_GPU_IS_LOST
		}
		return power()
	}
	n := 0
	gputest.LostAndBack(t, &logs, func() {
		if n == 1 {
			// The driver reports the loss as XID 79 before reads fail.
			m.events <- nvml.EventData{Device: m.devs[1], EventType: nvml.EventTypeXidCriticalError, EventData: 79}
			g := c.backend.(*nvmlBackend).gpus[1]
			require.Eventually(t, func() bool {
				g.xid.mu.Lock()
				defer g.xid.mu.Unlock()
				return g.xid.last == 79
			}, 5*time.Second, time.Millisecond)
		}
		lost = n >= 1 && n <= 3
		n++
		c.collectOnce(bg)
	}, newRegistry(t, c))
}
