package cadvisor

import (
	"bytes"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestKlogHandlerDemotesRegistrationLines: cAdvisor's per-runtime
// registration lines are DEBUG, everything else it says keeps its level.
func TestKlogHandlerDemotesRegistrationLines(t *testing.T) {
	for _, tc := range []struct {
		name  string
		level slog.Level
		want  []string
		not   []string
	}{
		{
			name:  "at info",
			level: slog.LevelInfo,
			want:  []string{"level=INFO msg=\"cAdvisor is starting\"", "level=WARN msg=\"Failed to read"},
			not:   []string{"Registration of the"},
		},
		{
			name:  "at debug",
			level: slog.LevelDebug,
			want: []string{
				"level=DEBUG msg=\"Registration of the crio container factory failed: dial unix /var/run/crio/crio.sock",
				"level=DEBUG msg=\"Registration of the systemd container factory successfully\"",
				"level=INFO msg=\"cAdvisor is starting\"",
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var buf bytes.Buffer
			l := slog.New(KlogHandler(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: tc.level}))).With("component", "cadvisor")
			l.Info("Registration of the crio container factory failed: dial unix /var/run/crio/crio.sock: connect: no such file or directory")
			l.Info("Registration of the systemd container factory successfully")
			l.Info("cAdvisor is starting")
			l.Warn("Failed to read a cgroup")
			for _, w := range tc.want {
				require.Contains(t, buf.String(), w)
			}
			for _, n := range tc.not {
				require.NotContains(t, buf.String(), n)
			}
			require.Contains(t, buf.String(), "component=cadvisor", "attributes survive the wrapper")
		})
	}
}
