//go:build e2e

package e2e

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestClusterBadNodeConfig: a node without a port is a config error that
// names the file and line, at check and at start, never a crash.
func TestClusterBadNodeConfig(t *testing.T) {
	t.Parallel()
	bad := writeConfig(t, t.TempDir(), "global:\n  scrape_interval: 1s\nnodes:\n  static:\n    - gpu-01:9089\n    - gpu-02\n")
	out, code := run(t, "check", "config", bad)
	require.Equal(t, 1, code, out)
	require.Contains(t, out, bad)
	require.Contains(t, out, bad+":6:")
	require.Contains(t, out, `"gpu-02" has no port`)

	q := start(t, "serve", "--web.listen-address=127.0.0.1:"+strconv.Itoa(freePort(t)), "--storage.tsdb.path="+t.TempDir(), "--config.file="+bad)
	require.Equal(t, 1, q.wait(30*time.Second))
	require.Contains(t, q.out.String(), bad+":6:")
	require.NotContains(t, q.out.String(), "panic")

	// The agent takes the same file (it reads no nodes section, but the
	// file must still be valid).
	q = start(t, "agent", "--web.listen-address=127.0.0.1:"+strconv.Itoa(freePort(t)), "--config.file="+bad)
	require.Equal(t, 1, q.wait(30*time.Second))
	require.Contains(t, q.out.String(), "has no port")
}
