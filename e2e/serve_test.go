//go:build e2e

package e2e

import (
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

const fastConfig = `
global:
  scrape_interval: 1s
  evaluation_interval: 1s
`

// TestServeBadInput: every bad input gets a clear answer and nothing is
// lost.
func TestServeBadInput(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfgFile := writeConfig(t, dir, fastConfig)
	data := filepath.Join(dir, "data")
	p := serve(t, data, "--config.file="+cfgFile)

	t.Run("malformed PromQL is 400 bad_data", func(t *testing.T) {
		code, body := p.get("/api/v1/query?query=" + url.QueryEscape("sum(rate(up[5m])"))
		require.Equal(t, 400, code)
		require.Contains(t, body, `"errorType":"bad_data"`)
		require.Contains(t, body, "parse error")
	})

	t.Run("query_range over 11,000 points is 400", func(t *testing.T) {
		code, body := p.get("/api/v1/query_range?query=up&start=0&end=20000&step=1")
		require.Equal(t, 400, code)
		require.Contains(t, body, `"errorType":"bad_data"`)
		require.Contains(t, body, "11,000 points")
	})

	t.Run("unknown config key: check config exits 1 naming the line", func(t *testing.T) {
		bad := writeConfig(t, t.TempDir(), "global:\n  scrape_interval: 1s\ncadvisor:\n  enabled: true\n  housekeeping: 5s\n")
		out, code := run(t, "check", "config", bad)
		require.Equal(t, 1, code, out)
		require.Contains(t, out, bad+":5: cadvisor.housekeeping: unknown key (did you mean housekeeping_interval?)")
		require.Contains(t, out, bad)

		bad2 := writeConfig(t, t.TempDir(), "global:\n  scrape_intervall: 1s\n")
		out, code = run(t, "check", "config", bad2)
		require.Equal(t, 1, code, out)
		require.Contains(t, out, bad2+":2: global.scrape_intervall: unknown key (did you mean scrape_interval?)")

		out, code = run(t, "check", "config", cfgFile)
		require.Equal(t, 0, code, out)
		require.Contains(t, out, "SUCCESS")
	})

	t.Run("second serve on the same data dir: locked, non-zero exit", func(t *testing.T) {
		q := start(t, "serve", "--web.listen-address=127.0.0.1:"+strconv.Itoa(freePort(t)), "--storage.tsdb.path="+data, "--config.file="+cfgFile)
		require.NotEqual(t, 0, q.wait(30*time.Second))
		require.Contains(t, q.out.String(), "lock data directory")
		require.Contains(t, q.out.String(), "is another gpuscope")
		// The first one is unharmed.
		code, _ := p.get("/-/ready")
		require.Equal(t, 200, code)
	})

	t.Run("port in use: clear error, non-zero exit", func(t *testing.T) {
		addr := strings.TrimPrefix(p.URL, "http://")
		q := start(t, "serve", "--web.listen-address="+addr, "--storage.tsdb.path="+t.TempDir(), "--config.file="+cfgFile)
		require.NotEqual(t, 0, q.wait(30*time.Second))
		require.Contains(t, q.out.String(), "address already in use")
		require.Contains(t, q.out.String(), "--web.listen-address")
	})

	t.Run("invalid config on SIGHUP keeps the old one running", func(t *testing.T) {
		require.NoError(t, os.WriteFile(cfgFile, []byte(fastConfig+"scrape_configs:\n  - job_name: broken\n    static_configs: [{targets: [\"a:1\"]}]\n    bogus: 1\n"), 0o644))
		p.signal(syscall.SIGHUP)
		eventually(t, 20*time.Second, "reload failure visible", func() error {
			v, err := p.instant(`gpuscope_config_last_reload_successful`)
			if err != nil {
				return err
			}
			if len(v) != 1 || v[0].Value != 0 {
				return fmt.Errorf("gpuscope_config_last_reload_successful = %v", v)
			}
			return nil
		})
		require.Contains(t, p.out.String(), "Reload failed")
		require.Contains(t, p.out.String(), "bogus")
		v, err := p.instant(`up{job="gpuscope"}`)
		require.NoError(t, err)
		require.Len(t, v, 1, "still scraping with the old config")

		// A valid one is then taken up: a new job appears.
		require.NoError(t, os.WriteFile(cfgFile, []byte(fastConfig+"scrape_configs:\n  - job_name: extra\n    static_configs: [{targets: [\"127.0.0.1:1\"]}]\n"), 0o644))
		p.signal(syscall.SIGHUP)
		eventually(t, 30*time.Second, "new job scraped (down) after a good reload", func() error {
			v, err := p.instant(`up{job="extra"}`)
			if err != nil {
				return err
			}
			if len(v) != 1 || v[0].Value != 0 {
				return fmt.Errorf("up{job=extra} = %v", v)
			}
			return nil
		})
	})
}

// run executes the binary to completion and returns combined output and
// exit code.
func run(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(binary, args...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	require.NoError(t, err)
	return string(out), 0
}
