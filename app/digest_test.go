package app_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/accounting"
	"github.com/gpuscope/gpuscope/app"
	"github.com/gpuscope/gpuscope/app/apptest"
	"github.com/gpuscope/gpuscope/digest"
)

// TestUsageDigestEmail: the usage digests reach the real SMTP server
// with the figures of the report they come from. alice (uid 1000) trains
// on one simulated GPU and bob (uid 1001) holds another idle, each from a
// process of theirs in a login session's cgroup. The users: section gives
// each an address; the route sends the per-user digests to
// '{{ template "gpuscope.owner.email" . }}' and the admin summary to the
// admin. POST /api/v1/digests/send sends them now; each user's email has
// their GPU-hours, idle GPU-hours and runs as /api/v1/workloads?by=user
// says for the same period, and the admin's has both users' rows.
func TestUsageDigestEmail(t *testing.T) {
	t.Parallel()
	smtp := startSMTP(t, "LOGIN PLAIN")
	n := rand.IntN(1e6)
	base := fmt.Sprintf("gpuscope-e2e-digest-%d", n)
	var pids []int
	for _, uid := range []uint32{1000, 1001} {
		var session *apptest.Cgroup
		for _, d := range []string{"", "/user.slice", fmt.Sprintf("/user.slice/user-%d.slice", uid), fmt.Sprintf("/user.slice/user-%d.slice/session-%d.scope", uid, n)} {
			session = newCgroup(t, base+d)
		}
		pids = append(pids, session.RunAs(t, uid, "sleep", "600"))
	}
	passwd := filepath.Join(t.TempDir(), "passwd")
	require.NoError(t, os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\nbob:x:1001:1001::/home/bob:/bin/sh\n"), 0o644))

	email := func(to string) string {
		return fmt.Sprintf(`        - to: '%s'
          from: gpuscope@lab.example
          smarthost: %s
          auth_username: gpuscope
          auth_password: s3cret pass
          require_tls: true
          tls_config: {ca_file: %q, server_name: localhost}
`, to, smtp.addr, smtp.caFile)
	}
	cfg := fmt.Sprintf(`
global:
  scrape_interval: 1s
  evaluation_interval: 1s
rules:
  builtin:
    time_scale: 60
gpu:
  backend: sim
  sim:
    count: 2
    time_scale: 60
    gpus: [{scenario: training, pid: %d}, {scenario: held-idle, pid: %d}]
workloads:
  passwd_file: %s
users:
  alice: {email: alice@lab.example, chat: "@alice"}
  bob: {email: bob@lab.example}
digests:
  enabled: false
alertmanager:
  route:
    receiver: nobody
    group_by: [alertname, digest, user]
    group_wait: 1s
    group_interval: 5s
    repeat_interval: 1h
    routes:
      - matchers: [alertname="GPUUsageDigest", digest="user"]
        receiver: owner
      - matchers: [alertname="GPUUsageDigest", digest="admin"]
        receiver: admin
  receivers:
    - name: nobody
    - name: owner
      email_configs:
%s    - name: admin
      email_configs:
%s`, pids[0], pids[1], passwd, email(`{{ template "gpuscope.owner.email" . }}`), email("gpu-admin@lab.example"))
	p := serve(t, "", configFile(writeConfig(t, t.TempDir(), cfg)), with(func(s *app.Settings) { s.AllowUnauthenticatedAdmin = true }))

	// Both users' runs accounted for a while: 20 s are 20 minutes at 60×.
	eventually(t, 90*time.Second, "GPU-hours recorded for alice and bob", func() error {
		v, err := p.instant(`sum by (user) (sum_over_time(gpu_workload:gpu_held:present[10m]))`)
		if err != nil {
			return err
		}
		got := map[string]float64{}
		for _, s := range v {
			got[string(s.Metric["user"])] = float64(s.Value)
		}
		if got["alice"] < 20 || got["bob"] < 20 {
			return fmt.Errorf("accounting samples by user: %v", got)
		}
		return nil
	})

	resp, err := http.Post(p.URL+"/api/v1/digests/send", "", nil)
	require.NoError(t, err)
	var sent struct {
		Status string      `json:"status"`
		Data   digest.Sent `json:"data"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&sent))
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, sent.Data.Users, "alice")
	require.Contains(t, sent.Data.Users, "bob")
	require.True(t, sent.Data.Admin)

	// The report of the same period, grouped by user, from the API.
	code, body := p.get(fmt.Sprintf("/api/v1/workloads?by=user&start=%d&end=%d", sent.Data.Start.Unix(), sent.Data.End.Unix()))
	require.Equal(t, http.StatusOK, code, body)
	var rep struct {
		Data []accounting.Group `json:"data"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &rep))
	byUser := map[string]accounting.Group{}
	for _, g := range rep.Data {
		byUser[g.Key["user"]] = g
	}

	var mails []receivedMail
	eventually(t, 60*time.Second, "three digests at the SMTP server", func() error {
		mails = smtp.mails(t)
		if len(mails) < 3 {
			return fmt.Errorf("%d mails", len(mails))
		}
		return nil
	})
	to := map[string]receivedMail{}
	for _, m := range mails {
		require.Len(t, m.meta.RcptTos, 1)
		to[m.meta.RcptTos[0]] = m
	}
	cell := func(html, row string) float64 {
		t.Helper()
		m := regexp.MustCompile(`<td[^>]*>` + regexp.QuoteMeta(row) + `</td><td[^>]*>([0-9.]+)</td>`).FindStringSubmatch(html)
		require.NotNil(t, m, "row %q in\n%s", row, html)
		v, err := strconv.ParseFloat(m[1], 64)
		require.NoError(t, err)
		return v
	}
	for _, u := range []struct{ name, addr string }{{"alice", "alice@lab.example"}, {"bob", "bob@lab.example"}} {
		t.Run(u.name, func(t *testing.T) {
			m, ok := to[u.addr]
			require.True(t, ok, "a digest to %s; mails to %v", u.addr, mailKeys(to))
			require.True(t, m.meta.TLS)
			subj, err := new(mime.WordDecoder).DecodeHeader(m.msg.Header.Get("Subject"))
			require.NoError(t, err)
			require.True(t, strings.HasPrefix(subj, "GPU use of "+u.name+" from "), subj)
			want := byUser[u.name]
			require.Positive(t, want.GPUHours, u.name)
			// The email's figures are the report's, to the digits it shows.
			require.InDelta(t, want.GPUHours, cell(m.html, "GPU-hours"), 0.005*want.GPUHours+1e-9)
			require.InDelta(t, want.IdleGPUHours, cell(m.html, "Idle GPU-hours (held at under 5% SM share)"), 0.005*want.IdleGPUHours+1e-9)
			require.Equal(t, float64(want.Runs), cell(m.html, "Runs"))
			require.Contains(t, m.html, "from "+sent.Data.Start.UTC().Format(time.RFC3339)+" to "+sent.Data.End.UTC().Format(time.RFC3339))
		})
	}
	require.Positive(t, byUser["bob"].IdleGPUHours, "bob's GPU is held idle")
	require.InDelta(t, byUser["bob"].GPUHours, byUser["bob"].IdleGPUHours, 0.2*byUser["bob"].GPUHours, "all of bob's hours idle")
	require.Less(t, byUser["alice"].IdleGPUHours, 0.2*byUser["alice"].GPUHours, "alice computes")

	admin, ok := to["gpu-admin@lab.example"]
	require.True(t, ok, "the admin summary; mails to %v", mailKeys(to))
	// Both users' rows, with the report's runs. (At 60× a stall of a few
	// seconds on a loaded machine is minutes of the scaled rules' time, and
	// can split a run in the stored series: the digest and the report
	// then both count the pieces.)
	for _, u := range []string{"alice", "bob"} {
		require.Regexp(t, fmt.Sprintf(`(?m)^%s\s+%d\s+`, u, byUser[u].Runs), admin.html, "%s's row with the report's runs", u)
	}
}

func mailKeys(m map[string]receivedMail) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}
