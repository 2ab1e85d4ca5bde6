package alertmanager

import (
	"flag"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	amconfig "github.com/prometheus/alertmanager/config"
	"github.com/prometheus/alertmanager/notify/mattermost"
	"github.com/prometheus/alertmanager/notify/msteams"
	"github.com/prometheus/alertmanager/notify/msteamsv2"
	"github.com/prometheus/alertmanager/notify/telegram"
	"github.com/prometheus/alertmanager/types"
	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite testdata/templates/ from the templates")

// sampleGroups are what gpuscope's notifications carry: a group of two
// firing alerts of one node (two GPUs, one named workload, one with a
// runbook), and one resolved alert.
func sampleGroups(now time.Time) map[string]struct {
	group  model.LabelSet
	alerts []*types.Alert
} {
	alert := func(ls, as model.LabelSet, start, end time.Time) *types.Alert {
		return &types.Alert{Alert: model.Alert{
			Labels: ls, Annotations: as, StartsAt: start, EndsAt: end,
			GeneratorURL: "http://gpu-01:9089/graph?g0.expr=DCGM_FI_DEV_FB_USED+%2F+DCGM_FI_DEV_FB_TOTAL+%3E+0.9&g0.tab=1",
		}}
	}
	return map[string]struct {
		group  model.LabelSet
		alerts []*types.Alert
	}{
		"firing": {
			group: model.LabelSet{"instance": "gpu-01", "alertname": "GPUMemoryAlmostFull"},
			alerts: []*types.Alert{
				alert(model.LabelSet{"alertname": "GPUMemoryAlmostFull", "severity": "critical", "instance": "gpu-01", "gpu": "0", "UUID": "GPU-0a", "workload": "llama-train", "user": "alice", "owner_chat": "@alice", "cluster": "lab"},
					model.LabelSet{"summary": "GPU 0 on gpu-01 has 95% of its memory in use", "description": "Framebuffer use above 90% for 10 minutes.\nLook next at the workload's batch size.", "runbook": "Lower the batch size & restart <llama-train>."},
					now.Add(-90*time.Minute), now.Add(time.Hour)),
				alert(model.LabelSet{"alertname": "GPUMemoryAlmostFull", "severity": "critical", "instance": "gpu-01", "gpu": "1", "UUID": "GPU-1b", "cluster": "lab"},
					model.LabelSet{"summary": "GPU 1 on gpu-01 has 92% of its memory in use", "description": "Framebuffer use above 90% for 10 minutes."},
					now.Add(-12*time.Minute), now.Add(time.Hour)),
			},
		},
		"resolved": {
			group: model.LabelSet{"instance": "gpu-02", "alertname": "GPUTemperatureHigh"},
			alerts: []*types.Alert{
				alert(model.LabelSet{"alertname": "GPUTemperatureHigh", "severity": "warning", "instance": "gpu-02", "gpu": "3"},
					model.LabelSet{"summary": "GPU 3 on gpu-02 is at 88 °C", "runbook_url": "https://runbooks.example/gpu-hot"},
					now.Add(-2*time.Hour), now.Add(-time.Minute)),
			},
		},
	}
}

// field is one default field of a receiver, as Alertmanager's config
// defaults name its template, rendered as the receiver renders it (text,
// or HTML for email's body and Telegram's HTML mode).
type field struct {
	receiver, name, text string
	html                 bool
}

func defaultFields() []field {
	return []field{
		{"email", "subject", amconfig.DefaultEmailSubject, false},
		{"email", "html", amconfig.DefaultEmailConfig.HTML, true},
		{"email", "text (opt-in)", `{{ template "email.gpuscope.text" . }}`, false},
		{"slack", "title", amconfig.DefaultSlackConfig.Title, false},
		{"slack", "title_link", amconfig.DefaultSlackConfig.TitleLink, false},
		{"slack", "text", amconfig.DefaultSlackConfig.Text, false},
		{"slack", "fallback", amconfig.DefaultSlackConfig.Fallback, false},
		{"slack", "color", amconfig.DefaultSlackConfig.Color, false},
		// discord's defaults are not exported; these are its config.go's.
		{"discord", "title", `{{ template "discord.default.title" . }}`, false},
		{"discord", "message", `{{ template "discord.default.message" . }}`, false},
		{"msteams", "title", msteams.DefaultMSTeamsConfig.Title, false},
		{"msteams", "text", msteams.DefaultMSTeamsConfig.Text, false},
		{"msteamsv2", "title", msteamsv2.DefaultMSTeamsV2Config.Title, false},
		{"msteamsv2", "text", msteamsv2.DefaultMSTeamsV2Config.Text, false},
		{"telegram", "message", telegram.DefaultTelegramConfig.Message, true},
		{"webex", "message", amconfig.DefaultWebexConfig.Message, false},
		{"mattermost", "title", mattermost.DefaultMattermostConfig.Title, false},
		{"mattermost", "text", mattermost.DefaultMattermostConfig.Text, false},
		{"pushover", "title", amconfig.DefaultPushoverConfig.Title, false},
		{"pushover", "message", amconfig.DefaultPushoverConfig.Message, false},
		{"pushover", "url", amconfig.DefaultPushoverConfig.URL, false},
		{"rocketchat", "title", amconfig.DefaultRocketchatConfig.Title, false},
		{"rocketchat", "text", amconfig.DefaultRocketchatConfig.Text, false},
	}
}

// sinceRE and timeRE match what the templates say of an alert's age and
// start, which move with the clock the sample alerts are set against.
var (
	sinceRE = regexp.MustCompile(`firing for (\d+h )?\d+m \d+s`)
	timeRE  = regexp.MustCompile(`\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC`)
)

// TestDefaultTemplates renders every receiver's default fields for the
// sample groups with gpuscope's templates, against the golden files in
// testdata/templates (go test -update rewrites them, for review), and
// checks that each says what fired, where, since when, what to look at
// and links back.
func TestDefaultTemplates(t *testing.T) {
	ext, err := url.Parse("http://gpu-01:9089/")
	require.NoError(t, err)
	tmpl, err := templates(nil, templateURL(ext))
	require.NoError(t, err)
	now := time.Now()
	groups := sampleGroups(now)
	for _, f := range defaultFields() {
		t.Run(f.receiver+" "+f.name, func(t *testing.T) {
			var golden strings.Builder
			for _, name := range []string{"firing", "resolved"} {
				g := groups[name]
				data := tmpl.Data("ops", g.group, nil, "", g.alerts...)
				var out string
				if f.html {
					out, err = tmpl.ExecuteHTMLString(f.text, data)
				} else {
					out, err = tmpl.ExecuteTextString(f.text, data)
				}
				require.NoError(t, err)
				checkRendered(t, f, name, out)
				golden.WriteString("---- " + name + "\n" + timeRE.ReplaceAllString(sinceRE.ReplaceAllString(out, "firing for <age>"), "<time>") + "\n")
			}
			path := filepath.Join("testdata", "templates", strings.ReplaceAll(f.receiver+"."+f.name, " ", "_")+".golden")
			if *update {
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, []byte(golden.String()), 0o644))
			}
			want, err := os.ReadFile(path)
			require.NoError(t, err, "go test -run TestDefaultTemplates -update ./alertmanager/ writes it")
			require.Equal(t, string(want), golden.String())
		})
	}
}

// checkRendered checks what each kind of field must say.
func checkRendered(t *testing.T, f field, group, out string) {
	t.Helper()
	firing := group == "firing"
	switch f.name {
	case "subject", "title", "fallback":
		want := "[RESOLVED] GPUTemperatureHigh on gpu-02: GPU 3 on gpu-02 is at 88 °C"
		if firing {
			want = "[FIRING:2] GPUMemoryAlmostFull on gpu-01"
		}
		require.True(t, strings.HasPrefix(out, want), "%q", out)
	case "title_link", "url":
		want := "http://gpu-01:9089/?node=gpu-02"
		if firing {
			want = "http://gpu-01:9089/?node=gpu-01"
		}
		require.Equal(t, want, out)
	case "color":
		require.Equal(t, map[bool]string{true: "danger", false: "good"}[firing], out)
	default: // the alert list
		if !firing {
			require.Contains(t, out, "GPUTemperatureHigh")
			require.Contains(t, out, "node gpu-02, GPU 3")
			require.Regexp(t, `resolved at \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC after 1h 59m 0s`, out)
			require.Contains(t, out, "https://runbooks.example/gpu-hot")
			return
		}
		for _, s := range []string{"GPUMemoryAlmostFull", "(critical)", "node gpu-01, GPU 0, workload llama-train", "node gpu-01, GPU 1",
			"GPU 0 on gpu-01 has 95% of its memory in use", "GPU 1 on gpu-01 has 92%"} {
			require.Contains(t, out, s)
		}
		require.Regexp(t, `firing for 1h 30m \d+s, since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC`, out)
		require.Regexp(t, `firing for 12m \d+s`, out)
		switch {
		case f.receiver == "slack":
			require.Contains(t, out, "Lower the batch size &amp; restart &lt;llama-train&gt;.", "Slack's escapes")
			require.Contains(t, out, "<http://gpu-01:9089/graph?g0.expr=DCGM_FI_DEV_FB_USED+%2F+DCGM_FI_DEV_FB_TOTAL+%3E+0.9&g0.tab=1|Graph>")
		case f.html:
			require.Contains(t, out, "Lower the batch size &amp; restart &lt;llama-train&gt;.", "HTML escapes")
			require.Contains(t, out, `<a href="http://gpu-01:9089/graph?g0.expr=DCGM_FI_DEV_FB_USED&#43;%2F&#43;DCGM_FI_DEV_FB_TOTAL&#43;%3E&#43;0.9&amp;g0.tab=1"`)
			require.Contains(t, out, `href="http://gpu-01:9089/?node=gpu-01"`)
		default:
			require.Contains(t, out, "Lower the batch size & restart <llama-train>.")
			require.Contains(t, out, "http://gpu-01:9089/graph?g0.expr=DCGM_FI_DEV_FB_USED+%2F+DCGM_FI_DEV_FB_TOTAL+%3E+0.9&g0.tab=1")
		}
		// The description, where the receiver's message has room for it.
		short := f.receiver == "telegram" || f.receiver == "discord" || f.receiver == "pushover"
		require.Equal(t, !short, strings.Contains(out, "Look next at the workload"), "description")
	}
}

// TestUserTemplatesOverride: a template of the section's templates:
// redefines gpuscope's (and Alertmanager's) definitions, and receivers
// that name a template of their own get it; gpuscope's stay for the rest.
func TestUserTemplatesOverride(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "mine.tmpl"), []byte(
		`{{ define "__subject" }}MINE {{ .CommonLabels.alertname }}{{ end }}{{ define "my.text" }}mine: {{ len .Alerts }}{{ end }}`), 0o644))
	tmpl, err := templates([]string{filepath.Join(dir, "*.tmpl")}, templateURL(&url.URL{Scheme: "http", Host: "gpu-01:9089", Path: "/gpuscope/"}))
	require.NoError(t, err)
	g := sampleGroups(time.Now())["firing"]
	data := tmpl.Data("ops", g.group, nil, "", g.alerts...)
	for text, want := range map[string]string{
		amconfig.DefaultSlackConfig.Title:     "MINE GPUMemoryAlmostFull",
		`{{ template "my.text" . }}`:          "mine: 2",
		amconfig.DefaultSlackConfig.TitleLink: "http://gpu-01:9089/gpuscope/?node=gpu-01",
	} {
		out, err := tmpl.ExecuteTextString(text, data)
		require.NoError(t, err)
		require.Equal(t, want, out)
	}
	out, err := tmpl.ExecuteTextString(amconfig.DefaultSlackConfig.Text, data)
	require.NoError(t, err)
	require.Contains(t, out, "node gpu-01, GPU 0, workload llama-train", "gpuscope's text where the user's templates say nothing")

	_, err = templates([]string{filepath.Join(dir, "[")}, nil)
	require.ErrorContains(t, err, "syntax error in pattern")
}

// TestDigestTemplates: a user's usage digest renders as a table of their
// figures in the email, with its summary as the subject; the admin's as
// its fixed-width table; in chat as the figures in plain text.
func TestDigestTemplates(t *testing.T) {
	ext, err := url.Parse("http://gpu-01:9089/")
	require.NoError(t, err)
	tmpl, err := templates(nil, templateURL(ext))
	require.NoError(t, err)
	now := time.Now()
	period := model.LabelSet{"period_start": "2026-11-23T08:00:00Z", "period_end": "2026-11-30T08:00:00Z"}
	user := &types.Alert{Alert: model.Alert{
		Labels: model.LabelSet{"alertname": "GPUUsageDigest", "digest": "user", "user": "alice", "owner_chat": "@alice", "severity": "info"},
		Annotations: model.LabelSet{"summary": "GPU use of alice from 2026-11-23 to 2026-11-30: 4.00 GPU-hours",
			"description": "Your GPU use ...\nGPU-hours: 4.00\nIdle GPU-hours (held at under 5% SM share): 1.00",
			"runs":        "2", "gpu_hours": "4.00", "idle_gpu_hours": "1.00", "sm_share_avg_percent": "40", "gpu_memory_peak": "2.0 GiB",
			"energy_kwh": "1.20", "cost": "9.00", "currency": "EUR"}.Merge(period),
		StartsAt: now, EndsAt: now.Add(time.Hour), GeneratorURL: "http://gpu-01:9089/api/v1/workloads?by=user",
	}}
	admin := &types.Alert{Alert: model.Alert{
		Labels: model.LabelSet{"alertname": "GPUUsageDigest", "digest": "admin", "severity": "info"},
		Annotations: model.LabelSet{"summary": "GPU use by user from 2026-11-23 to 2026-11-30: 2 users, 6.50 GPU-hours, 1.00 idle",
			"description": "USER       RUNS  GPU-H\nalice      2     4.00\n(unknown)  1     0.50\n"}.Merge(period),
		StartsAt: now, EndsAt: now.Add(time.Hour),
	}}

	data := tmpl.Data("alice-email", model.LabelSet{"alertname": "GPUUsageDigest", "user": "alice"}, nil, "", user)
	subject, err := tmpl.ExecuteTextString(`{{ template "__subject" . }}`, data)
	require.NoError(t, err)
	require.Equal(t, "GPU use of alice from 2026-11-23 to 2026-11-30: 4.00 GPU-hours", subject)
	html, err := tmpl.ExecuteHTMLString(`{{ template "email.default.html" . }}`, data)
	require.NoError(t, err)
	require.Regexp(t, `<td[^>]*>GPU-hours</td><td[^>]*>4\.00</td>`, html)
	require.Regexp(t, `<td[^>]*>Idle GPU-hours \(held at under 5% SM share\)</td><td[^>]*>1\.00</td>`, html)
	require.Regexp(t, `<td[^>]*>Cost</td><td[^>]*>9\.00 EUR</td>`, html)
	require.Contains(t, html, "from 2026-11-23T08:00:00Z to 2026-11-30T08:00:00Z")
	require.NotContains(t, html, "Firing", "a digest is not a fault")

	data = tmpl.Data("admin-email", model.LabelSet{"alertname": "GPUUsageDigest", "digest": "admin"}, nil, "", admin)
	html, err = tmpl.ExecuteHTMLString(`{{ template "email.default.html" . }}`, data)
	require.NoError(t, err)
	require.Contains(t, html, "<pre style=\"margin:8px 0 0;font-family:Menlo,Consolas,monospace;font-size:12px\">USER       RUNS  GPU-H\nalice      2     4.00\n(unknown)  1     0.50\n</pre>")

	data = tmpl.Data("alice-chat", model.LabelSet{"alertname": "GPUUsageDigest", "user": "alice"}, nil, "", user)
	text, err := tmpl.ExecuteTextString(`{{ template "slack.default.text" . }}`, data)
	require.NoError(t, err)
	require.Contains(t, text, "user alice (@alice)")
	require.Contains(t, text, "GPU-hours: 4.00\nIdle GPU-hours (held at under 5% SM share): 1.00")
	require.Contains(t, text, "from 2026-11-23T08:00:00Z to 2026-11-30T08:00:00Z")
}
