package app_test

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"mime"
	"mime/multipart"
	"mime/quotedprintable"
	"net"
	"net/http"
	"net/http/httptest"
	"net/mail"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/app"
	"github.com/gpuscope/gpuscope/packaging/pkgtest"
)

// The receivers Alertmanager v0.34.1 ships, each tested for real against
// a local server that speaks its service's side: email through a real
// SMTP server (Debian's python3-aiosmtpd) that requires STARTTLS and
// AUTH, and the chat services through an HTTP server standing in for
// their APIs at the api_url / webhook_url each receiver lets one set.
// Each request is checked against the service's documented format, and
// each message for what gpuscope's default templates put in it: what
// fired, on which node and GPU, since when, and the links back.
// (Alertmanager v0.34.1 has no ntfy receiver; Pushover's API address is
// fixed, so it is left out.)

// capturedRequest is one request a fake service received.
type capturedRequest struct {
	path   string
	header http.Header
	body   []byte
}

// fakeServices answers as Slack, Discord, Teams, Telegram, Webex,
// Mattermost and Rocket.Chat do, each under its own path, and keeps
// every request.
type fakeServices struct {
	srv  *httptest.Server
	mu   sync.Mutex
	reqs []capturedRequest
}

func newFakeServices(t *testing.T) *fakeServices {
	t.Helper()
	f := &fakeServices{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		f.mu.Lock()
		f.reqs = append(f.reqs, capturedRequest{path: r.URL.Path, header: r.Header.Clone(), body: body})
		f.mu.Unlock()
		switch {
		case strings.HasPrefix(r.URL.Path, "/slack"):
			// An incoming webhook answers "ok" in plain text.
			w.Header().Set("Content-Type", "text/plain")
			fmt.Fprint(w, "ok")
		case strings.HasPrefix(r.URL.Path, "/discord"):
			w.WriteHeader(http.StatusNoContent)
		case strings.HasPrefix(r.URL.Path, "/telegram/"):
			// The Bot API's answer: the message sent.
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprintf(w, `{"ok":true,"result":{"message_id":1,"date":%d,"chat":{"id":-1001234,"type":"group"}}}`, time.Now().Unix())
		case strings.HasPrefix(r.URL.Path, "/rocketchat/"):
			w.Header().Set("Content-Type", "application/json")
			fmt.Fprint(w, `{"success":true}`)
		default: // Teams, Webex, Mattermost: 200 and any body
			fmt.Fprint(w, "1")
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

// find returns the first request to path whose body contains every one
// of ss.
func (f *fakeServices) find(path string, ss ...string) (capturedRequest, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, r := range f.reqs {
		if r.path == path && !slices.ContainsFunc(ss, func(s string) bool { return !strings.Contains(string(r.body), s) }) {
			return r, true
		}
	}
	return capturedRequest{}, false
}

// smtpServer is the aiosmtpd server of testdata/smtpd.py.
type smtpServer struct {
	addr, dir, caFile string
}

// startSMTP runs testdata/smtpd.py on a free loopback port with a
// self-signed certificate for localhost, user gpuscope and its password,
// offering the AUTH mechanisms given ("LOGIN PLAIN" or "PLAIN").
func startSMTP(t *testing.T, mechanisms string) *smtpServer {
	t.Helper()
	const python = "/usr/bin/python3" // Debian's, which has python3-aiosmtpd
	if err := exec.Command(python, "-c", "import aiosmtpd").Run(); err != nil {
		if pkgtest.InCI() {
			t.Fatalf("python3-aiosmtpd: %v; .ci/run installs it", err)
		}
		t.Skipf("needs Debian's python3-aiosmtpd: %v", err)
	}
	dir := t.TempDir()
	certFile, keyFile := writeSelfSigned(t, dir)
	out := filepath.Join(dir, "mail")
	require.NoError(t, os.Mkdir(out, 0o755))
	port := freePort(t)
	cmd := exec.Command(python, "testdata/smtpd.py", strconv.Itoa(port), certFile, keyFile, "gpuscope", "s3cret pass", out, mechanisms)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr pkgtest.SyncBuffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("smtpd.py:\n%s", stderr.String())
		}
	})
	ready := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && line != "ready\n" {
			err = fmt.Errorf("smtpd.py said %q", line)
		}
		ready <- err
	}()
	select {
	case err := <-ready:
		require.NoError(t, err, stderr.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("smtpd.py not ready after 30s:\n%s", stderr.String())
	}
	return &smtpServer{addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), dir: out, caFile: certFile}
}

// writeSelfSigned writes a certificate for localhost and 127.0.0.1 and
// its key, and returns their paths.
func writeSelfSigned(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "localhost"},
		DNSNames:              []string{"localhost"},
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	return certFile, keyFile
}

// receivedMail is one message the SMTP server accepted.
type receivedMail struct {
	msg  *mail.Message
	html string
	meta struct {
		MailFrom string   `json:"mail_from"`
		RcptTos  []string `json:"rcpt_tos"`
		Login    string   `json:"login"`
		TLS      bool     `json:"tls"`
	}
}

// mails reads every message the server accepted so far.
func (s *smtpServer) mails(t *testing.T) []receivedMail {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(s.dir, "*.eml"))
	require.NoError(t, err)
	var out []receivedMail
	for _, f := range files {
		var m receivedMail
		b, err := os.ReadFile(strings.TrimSuffix(f, ".eml") + ".json")
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &m.meta))
		raw, err := os.Open(f)
		require.NoError(t, err)
		m.msg, err = mail.ReadMessage(raw)
		require.NoError(t, err, f)
		m.html = htmlPart(t, m.msg)
		raw.Close()
		out = append(out, m)
	}
	return out
}

// htmlPart returns the decoded text/html part of a message.
func htmlPart(t *testing.T, m *mail.Message) string {
	t.Helper()
	mediaType, params, err := mime.ParseMediaType(m.Header.Get("Content-Type"))
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(mediaType, "multipart/"), "a MIME multipart message, not %s", mediaType)
	r := multipart.NewReader(m.Body, params["boundary"])
	for {
		p, err := r.NextPart()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		ct, _, _ := mime.ParseMediaType(p.Header.Get("Content-Type"))
		if ct != "text/html" {
			continue
		}
		var body io.Reader = p // multipart decodes quoted-printable itself
		if p.Header.Get("Content-Transfer-Encoding") != "" {
			body = quotedprintable.NewReader(p)
		}
		b, err := io.ReadAll(body)
		require.NoError(t, err)
		return string(b)
	}
	t.Fatal("no text/html part")
	return ""
}

// TestEmbeddedAlertmanagerReceivers: GPUMemoryAlmostFull of two
// memory-bound GPUs reaches every receiver in one notification each, in
// each service's format and with gpuscope's templates.
func TestEmbeddedAlertmanagerReceivers(t *testing.T) {
	t.Parallel()
	// Alertmanager authenticates with the first mechanism a server
	// lists: LOGIN with one, PLAIN with the other.
	smtp, smtpPlain := startSMTP(t, "LOGIN PLAIN"), startSMTP(t, "PLAIN")
	fake := newFakeServices(t)
	u := fake.srv.URL
	receivers := fmt.Sprintf(`  route:
    receiver: nobody
    group_by: [instance, alertname]
    group_wait: 5s
    group_interval: 5s
    repeat_interval: 1h
    routes:
      - matchers: [alertname="GPUMemoryAlmostFull"]
        receiver: team
  receivers:
    - name: nobody
    - name: team
      email_configs:
        - to: gpu-team@example.com
          from: gpuscope@example.com
          smarthost: %[2]s
          hello: gpuscope.example
          auth_username: gpuscope
          auth_password: s3cret pass
          require_tls: true
          tls_config: {ca_file: %[3]q, server_name: localhost}
        - to: gpu-oncall@example.com
          from: gpuscope@example.com
          smarthost: %[4]s
          auth_username: gpuscope
          auth_password: s3cret pass
          tls_config: {ca_file: %[5]q, server_name: localhost}
      slack_configs:
        - api_url: %[1]s/slack/T0/B0/XXX
          channel: '#gpu'
      discord_configs:
        - webhook_url: %[1]s/discord/api/webhooks/1/abc
      msteams_configs:
        - webhook_url: %[1]s/teams/webhookb2/abc
      msteamsv2_configs:
        - webhook_url: %[1]s/teamsv2/workflows/abc
      telegram_configs:
        - api_url: %[1]s/telegram
          bot_token: "123:ABC"
          chat_id: -1001234
      webex_configs:
        - api_url: %[1]s/webex/v1/messages
          room_id: room-1
          http_config: {authorization: {credentials: webex-token}}
      mattermost_configs:
        - webhook_url: %[1]s/mattermost/hooks/abc
      rocketchat_configs:
        - api_url: %[1]s/rocketchat/
          channel: '#gpu'
          token_id: user-1
          token: rc-token
`, u, smtp.addr, smtp.caFile, smtpPlain.addr, smtpPlain.caFile)
	cfg := writeConfig(t, t.TempDir(), embeddedConfig(receivers, "memory-bound", "memory-bound"))
	const ext = "http://gpuscope.example:9089"
	p := serve(t, "", configFile(cfg), with(func(s *app.Settings) { s.ExternalURL = ext + "/" }))

	const subject = "[FIRING:2] GPUMemoryAlmostFull on e2e-node"
	overview := ext + "/?node=e2e-node"
	var got map[string]capturedRequest
	eventually(t, 150*time.Second, "a notification with both GPUs at every chat service", func() error {
		got = map[string]capturedRequest{}
		var missing []string
		for _, path := range []string{"/slack/T0/B0/XXX", "/discord/api/webhooks/1/abc", "/teams/webhookb2/abc", "/teamsv2/workflows/abc",
			"/telegram/bot123:ABC/sendMessage", "/webex/v1/messages", "/mattermost/hooks/abc", "/rocketchat/api/v1/chat.postMessage"} {
			r, ok := fake.find(path, "GPU 0 on e2e-node has had", "GPU 1 on e2e-node has had")
			if !ok {
				missing = append(missing, path)
			}
			got[path] = r
		}
		if len(missing) > 0 {
			return fmt.Errorf("none with both GPUs yet at %v", missing)
		}
		return nil
	})
	for path, r := range got {
		require.Contains(t, r.header.Get("Content-Type"), "application/json", path)
	}
	// What each alert's text must say, in each service's markup.
	checkAlerts := func(t *testing.T, text, open, close string) {
		t.Helper()
		for _, gpu := range []string{"0", "1"} {
			require.Contains(t, text, open+"GPUMemoryAlmostFull"+close+" (critical) on node e2e-node, GPU "+gpu)
			require.Contains(t, text, "GPU "+gpu+" on e2e-node has had over 90% of its memory in use")
		}
		require.Regexp(t, `firing for (\d+m )?\d+(\.\d+)?s, since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC`, text)
		require.Contains(t, text, ext+"/", "the alert's generatorURL")
	}

	t.Run("slack", func(t *testing.T) {
		// https://api.slack.com/messaging/webhooks, with attachments
		// (https://api.slack.com/reference/messaging/attachments).
		var m struct {
			Channel     string `json:"channel"`
			Username    string `json:"username"`
			Attachments []struct {
				Title, TitleLink, Text, Fallback, Color string
				MrkdwnIn                                []string `json:"mrkdwn_in"`
			} `json:"attachments"`
		}
		require.NoError(t, json.Unmarshal(got["/slack/T0/B0/XXX"].body, &m))
		require.Equal(t, "#gpu", m.Channel)
		require.Equal(t, "gpuscope", m.Username)
		require.Len(t, m.Attachments, 1)
		a := m.Attachments[0]
		require.Equal(t, subject, a.Title)
		require.Equal(t, "danger", a.Color)
		require.Contains(t, a.MrkdwnIn, "text")
		require.Equal(t, subject+" | "+overview, a.Fallback)
		checkAlerts(t, a.Text, "*", "*")
		require.Contains(t, a.Text, "|Graph>", "a Slack link")
		var raw map[string]any
		require.NoError(t, json.Unmarshal(got["/slack/T0/B0/XXX"].body, &raw))
		require.Equal(t, overview, raw["attachments"].([]any)[0].(map[string]any)["title_link"])
	})
	t.Run("discord", func(t *testing.T) {
		// https://discord.com/developers/docs/resources/webhook#execute-webhook
		var m struct {
			Content string `json:"content"`
			Embeds  []struct {
				Title, Description string
				Color              int
			} `json:"embeds"`
		}
		require.NoError(t, json.Unmarshal(got["/discord/api/webhooks/1/abc"].body, &m))
		require.Len(t, m.Embeds, 1)
		require.Equal(t, subject, m.Embeds[0].Title)
		require.Equal(t, 0x992D22, m.Embeds[0].Color, "Alertmanager's red for firing")
		checkAlerts(t, m.Embeds[0].Description, "**", "**")
		require.Contains(t, m.Embeds[0].Description, "[Open gpuscope]("+overview+")")
	})
	t.Run("msteams", func(t *testing.T) {
		// An Office 365 connector's MessageCard.
		var m map[string]string
		require.NoError(t, json.Unmarshal(got["/teams/webhookb2/abc"].body, &m))
		require.Equal(t, "MessageCard", m["type"])
		require.Equal(t, "http://schema.org/extensions", m["@context"])
		require.Equal(t, subject, m["title"])
		require.Equal(t, subject, m["summary"])
		require.Equal(t, "8C1A1A", m["themeColor"])
		checkAlerts(t, m["text"], "**", "**")
		require.Contains(t, m["text"], "[Graph]("+ext+"/")
	})
	t.Run("msteamsv2", func(t *testing.T) {
		// A Workflows (Power Automate) webhook's Adaptive Card.
		var m struct {
			Type        string `json:"type"`
			Attachments []struct {
				ContentType string `json:"contentType"`
				Content     struct {
					Type, Version string
					Body          []struct{ Type, Text string }
				} `json:"content"`
			} `json:"attachments"`
		}
		require.NoError(t, json.Unmarshal(got["/teamsv2/workflows/abc"].body, &m))
		require.Equal(t, "message", m.Type)
		require.Len(t, m.Attachments, 1)
		a := m.Attachments[0]
		require.Equal(t, "application/vnd.microsoft.card.adaptive", a.ContentType)
		require.Equal(t, "AdaptiveCard", a.Content.Type)
		require.Len(t, a.Content.Body, 2)
		require.Equal(t, "TextBlock", a.Content.Body[0].Type)
		require.Equal(t, subject, a.Content.Body[0].Text)
		checkAlerts(t, a.Content.Body[1].Text, "**", "**")
	})
	t.Run("telegram", func(t *testing.T) {
		// https://core.telegram.org/bots/api#sendmessage: POST
		// <api_url>/bot<token>/sendMessage, HTML parse mode.
		var m map[string]string
		require.NoError(t, json.Unmarshal(got["/telegram/bot123:ABC/sendMessage"].body, &m))
		require.Equal(t, "-1001234", m["chat_id"])
		require.Equal(t, "HTML", m["parse_mode"])
		require.Equal(t, "true", m["disable_web_page_preview"])
		require.True(t, strings.HasPrefix(m["text"], "<b>"+subject+"</b>\n"), m["text"])
		checkAlerts(t, m["text"], "<b>", "</b>")
		require.Contains(t, m["text"], `<a href="`+overview+`">Open gpuscope</a>`)
		require.NotContains(t, m["text"], "<p>", "only the tags Telegram knows")
	})
	t.Run("webex", func(t *testing.T) {
		// https://developer.webex.com/docs/api/v1/messages/create-a-message
		r := got["/webex/v1/messages"]
		require.Equal(t, "Bearer webex-token", r.header.Get("Authorization"))
		var m map[string]string
		require.NoError(t, json.Unmarshal(r.body, &m))
		require.Equal(t, "room-1", m["roomId"])
		checkAlerts(t, m["markdown"], "", "")
	})
	t.Run("mattermost", func(t *testing.T) {
		// https://developers.mattermost.com/integrate/webhooks/incoming/
		var m struct {
			Username    string `json:"username"`
			Attachments []struct {
				Title     string `json:"title"`
				TitleLink string `json:"title_link"`
				Text      string `json:"text"`
				Color     string `json:"color"`
			} `json:"attachments"`
		}
		require.NoError(t, json.Unmarshal(got["/mattermost/hooks/abc"].body, &m))
		require.Equal(t, "gpuscope", m.Username)
		require.Len(t, m.Attachments, 1)
		require.Equal(t, subject, m.Attachments[0].Title)
		require.Equal(t, overview, m.Attachments[0].TitleLink)
		checkAlerts(t, m.Attachments[0].Text, "**", "**")
	})
	t.Run("rocketchat", func(t *testing.T) {
		// https://developer.rocket.chat/apidocs/post-message
		r := got["/rocketchat/api/v1/chat.postMessage"]
		require.Equal(t, "rc-token", r.header.Get("X-Auth-Token"))
		require.Equal(t, "user-1", r.header.Get("X-User-Id"))
		var m struct {
			Channel     string `json:"channel"`
			Attachments []struct {
				Title     string `json:"title"`
				TitleLink string `json:"title_link"`
				Text      string `json:"text"`
			} `json:"attachments"`
		}
		require.NoError(t, json.Unmarshal(r.body, &m))
		require.Equal(t, "#gpu", m.Channel)
		require.Len(t, m.Attachments, 1)
		require.Equal(t, subject, m.Attachments[0].Title)
		require.Equal(t, overview, m.Attachments[0].TitleLink)
		checkAlerts(t, m.Attachments[0].Text, "**", "**")
	})

	for _, c := range []struct {
		name, to string
		server   *smtpServer
	}{{"email LOGIN", "gpu-team@example.com", smtp}, {"email PLAIN", "gpu-oncall@example.com", smtpPlain}} {
		t.Run(c.name, func(t *testing.T) {
			var m receivedMail
			eventually(t, 30*time.Second, "the email with both GPUs", func() error {
				for _, m = range c.server.mails(t) {
					if strings.Contains(m.html, "FIRING:2") {
						return nil
					}
				}
				return fmt.Errorf("not received")
			})
			require.True(t, m.meta.TLS, "STARTTLS before the message")
			require.Equal(t, "gpuscope", m.meta.Login, "authenticated")
			require.Equal(t, "gpuscope@example.com", m.meta.MailFrom)
			require.Equal(t, []string{c.to}, m.meta.RcptTos)
			subj, err := new(mime.WordDecoder).DecodeHeader(m.msg.Header.Get("Subject"))
			require.NoError(t, err)
			require.Equal(t, subject, subj)
			require.Equal(t, c.to, m.msg.Header.Get("To"))
			require.Equal(t, "gpuscope@example.com", m.msg.Header.Get("From"))
			checkAlerts(t, m.html, "<b>", "</b>")
			require.Contains(t, m.html, `<a href="`+overview+`" style="color:#348eda">Open gpuscope</a> · sent by gpuscope to team`)
			require.Contains(t, m.html, `<a href="`+ext+"/")
			require.Contains(t, m.html, "the next allocation may", "the alert's description")
		})
	}

	// Every integration delivered, none failed.
	eventually(t, 15*time.Second, "every integration counted as delivered", func() error {
		v, err := p.instant(`count(sum by (integration) (alertmanager_notifications_total{receiver_name="team"}) > 0)`)
		if err != nil {
			return err
		}
		if len(v) != 1 || v[0].Value != 9 {
			return fmt.Errorf("%v", v)
		}
		return nil
	})
	v, err := p.instant(`sum(last_over_time(alertmanager_notifications_failed_total{receiver_name="team"}[5s]))`)
	require.NoError(t, err)
	require.Len(t, v, 1)
	require.Zero(t, float64(v[0].Value), "no receiver failed")
}
