package sim

import (
	"bytes"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu/internal/gputest"
)

// TestSimGPULostAndBack: gpu.sim.gpus[].lost_at/lost_for make a simulated
// GPU fall off the bus for a while, as NVML reports it
// (gputest.LostAndBack, which the NVML backend passes too).
func TestSimGPULostAndBack(t *testing.T) {
	clock := gputest.NewClock()
	o := simOptions(clock, GPU{Scenario: ScenarioTraining},
		GPU{Scenario: ScenarioTraining, LostAt: model.Duration(10 * time.Second), LostFor: model.Duration(30 * time.Second)})
	var logs bytes.Buffer
	o.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	c, reg := testCollector(t, o)
	// Cycles at 0 s (before), 10, 20, 30 s (lost) and 40 s (back).
	first := true
	gputest.LostAndBack(t, &logs, func() {
		if !first {
			clock.Advance(10 * time.Second)
		}
		first = false
		sampleOnce(t, c)
	}, reg)
}

func TestSimLostValidation(t *testing.T) {
	cfg := DefaultConfig()
	cfg.GPUs = []GPU{{LostFor: model.Duration(time.Second)}}
	require.ErrorContains(t, cfg.Validate(), "gpu.sim.gpus[0].lost_for: set lost_at too")
	cfg.GPUs = []GPU{{LostAt: model.Duration(-time.Second)}}
	require.ErrorContains(t, cfg.Validate(), "must not be negative")
	cfg.GPUs = []GPU{{LostAt: model.Duration(time.Second)}}
	require.NoError(t, cfg.Validate(), "lost for good")
}
