package app

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/config"
	"github.com/gpuscope/gpuscope/gpu/sim"
)

// TestLogDemo: --demo says at start where its data goes and what each
// simulated GPU shows.
func TestLogDemo(t *testing.T) {
	var buf bytes.Buffer
	logger := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	var c config.GPU
	c.Config, c.Sim = sim.DemoConfig()
	c.Sim.Count = 9 // one past the list: idle
	logDemo(logger, c, config.DemoDataDir)

	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 10)
	require.Contains(t, lines[0], `data_dir=data-demo/ gpus=9 time_scale=30`)
	require.Equal(t, `level=INFO msg="Demo GPU" gpu=2 scenario=leak container=/gpuscope-demo/leaky shows="framebuffer climbing 2 GiB a step; GPUMemoryLeakSuspected"`, lines[3])
	require.Equal(t, `level=INFO msg="Demo GPU" gpu=8 scenario=idle container="" shows="no process; classed idle; no alert"`, lines[9])
}
