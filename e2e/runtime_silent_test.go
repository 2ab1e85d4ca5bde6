//go:build e2e

package e2e

import (
	"fmt"
	"net"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestRuntimeSocketSilent: a Docker socket that accepts connections and
// never answers (a hung dockerd) costs gpuscope five seconds at start,
// not its container metrics: cAdvisor's Docker plugin would retry such a
// socket without end while creating its manager, leaving /metrics/cadvisor
// waiting and the cadvisor target down. Containers are then measured as
// raw cgroups, and one WARN line says why.
func TestRuntimeSocketSilent(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sock := filepath.Join(dir, "docker.sock")
	l, err := net.Listen("unix", sock)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	go func() {
		var held []net.Conn // accepted, never answered, closed with the listener's test
		for {
			c, err := l.Accept()
			if err != nil {
				for _, c := range held {
					_ = c.Close()
				}
				return
			}
			held = append(held, c)
		}
	}()
	cfg := writeConfig(t, dir, `
global: {scrape_interval: 1s, evaluation_interval: 1s}
gpu: {backend: none}
cadvisor:
  docker_endpoint: unix://`+sock+`
  podman_endpoint: unix://`+filepath.Join(dir, "absent-podman.sock")+`
`)
	p := serve(t, filepath.Join(dir, "data"), "--config.file="+cfg)
	eventually(t, 60*time.Second, "the root cgroup's CPU series from the cadvisor job", func() error {
		v, err := p.instant(`container_cpu_usage_seconds_total{job="cadvisor",id="/"}`)
		if err != nil {
			return err
		}
		if len(v) != 1 {
			return fmt.Errorf("no root cgroup series yet: %v", v)
		}
		return nil
	})
	var lines []string
	for _, line := range strings.Split(p.out.String(), "\n") {
		if strings.Contains(line, "docker") {
			lines = append(lines, line)
		}
	}
	require.Len(t, lines, 1, "one line about Docker:\n%s", strings.Join(lines, "\n"))
	require.Regexp(t, regexp.MustCompile(`level=WARN .*msg="cAdvisor started".*why_not_found=".*docker: unix://\S+ accepts connections but does not answer within 5s`), lines[0])
	require.Contains(t, lines[0], "podman: unix://"+filepath.Join(dir, "absent-podman.sock")+": dial unix", "the absent socket says why too")
}
