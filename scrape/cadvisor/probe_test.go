package cadvisor

import (
	"context"
	"errors"
	"net"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestProbeRuntime: an API that answers passes, a socket that accepts and
// stays silent is errNotAnswering (and cAdvisor is pointed away from it),
// an absent socket is the dial error.
func TestProbeRuntime(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()

	answering := filepath.Join(dir, "docker.sock")
	l, err := net.Listen("unix", answering)
	require.NoError(t, err)
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/_ping" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("OK"))
	})}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	require.NoError(t, probeRuntime(ctx, "unix://"+answering))

	silent := filepath.Join(dir, "silent.sock")
	sl, err := net.Listen("unix", silent)
	require.NoError(t, err)
	t.Cleanup(func() { _ = sl.Close() })
	held := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := sl.Accept()
			if err != nil {
				return
			}
			held <- c // accepted, never answered
		}
	}()
	err = probeRuntime(ctx, "unix://"+silent)
	require.ErrorIs(t, err, errNotAnswering)

	absent := filepath.Join(dir, "absent.sock")
	err = probeRuntime(ctx, "unix://"+absent)
	require.ErrorIs(t, err, syscall.ENOENT)
	require.False(t, errors.Is(err, errNotAnswering))

	cfg, why := Config{DockerEndpoint: "unix://" + silent, PodmanEndpoint: "unix://" + absent}.guardEndpoints(ctx)
	require.Equal(t, deadEndpoint, cfg.DockerEndpoint, "a silent Docker socket is not handed to cAdvisor, whose start would wait for it forever")
	require.Equal(t, "unix://"+absent, cfg.PodmanEndpoint, "an absent one fails fast in cAdvisor by itself")
	require.Equal(t, "unix://"+silent+" accepts connections but does not answer within 5s", why["docker"])
	require.Contains(t, why["podman"], "no such file or directory")
	require.Error(t, probeRuntime(ctx, deadEndpoint), "the dead endpoint fails at once")
}
