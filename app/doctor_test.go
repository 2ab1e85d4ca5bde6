package app_test

import (
	"encoding/json"
	"errors"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/app"
	"github.com/gpuscope/gpuscope/config"
	"github.com/gpuscope/gpuscope/doctor"
)

// TestDoctorRunningAppliance: with serve running, the doctor finds its
// port held by gpuscope, asks it for its targets and containers, and
// reports each job's last scrape. The doctor runs as `gpuscope doctor
// --web.listen-address --storage.tsdb.path` runs it, through the doctor
// package (e2e's doctor tests run the command itself).
func TestDoctorRunningAppliance(t *testing.T) {
	t.Parallel()
	p := serve(t, "", with(func(s *app.Settings) { s.GPUBackend = "sim" }))
	eventually(t, 60*time.Second, "every target scraped once", func() error {
		_, body := p.get("/api/v1/targets?state=active")
		var r struct {
			Data struct {
				ActiveTargets []struct {
					LastScrape time.Time `json:"lastScrape"`
				} `json:"activeTargets"`
			} `json:"data"`
		}
		if err := json.Unmarshal([]byte(body), &r); err != nil {
			return err
		}
		if len(r.Data.ActiveTargets) == 0 {
			return errors.New("no target yet")
		}
		for _, tg := range r.Data.ActiveTargets {
			if tg.LastScrape.IsZero() {
				return errors.New("a target not scraped yet")
			}
		}
		return nil
	})
	addr := strings.TrimPrefix(p.URL, "http://")
	checks := doctor.Run(t.Context(), doctor.Options{Config: config.Default(nil), DataDir: p.DataDir, ListenAddress: addr, URL: "http://localhost:" + addr[strings.LastIndex(addr, ":")+1:]})
	var b strings.Builder
	require.NoError(t, doctor.WriteText(&b, checks))
	out := b.String()
	t.Logf("gpuscope doctor:\n%s", out)
	require.Regexp(t, `(?m)^ok +listen +`+regexp.QuoteMeta(addr)+` is in use by a running gpuscope$`, out)
	require.Regexp(t, `(?m)^ok +appliance +gpuscope answers at http://localhost:\d+, 3 active targets$`, out)
	for _, job := range []string{"gpuscope", "cadvisor", "gpu"} {
		require.Regexp(t, `(?m)^ok +scrape/`+job+` +e2e-node last scraped \d+s ago$`, out)
	}
	require.Regexp(t, `(?m)^(ok|warn) +containers +cAdvisor sees e2e-node: \d+ cgroups, \d+ with an image`, out)
	require.Regexp(t, `(?m)^ok +data-dir +`+regexp.QuoteMeta(p.DataDir)+` writable, .*, TSDB \d`, out)
}
