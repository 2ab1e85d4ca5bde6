package alertmanager

import (
	"bytes"
	"encoding/json"
	"errors"
	"net/http"
	"runtime/debug"
	"strings"

	"github.com/go-openapi/strfmt"
)

// Handler serves Alertmanager's API v2 under /api/v2/ (alerts, alert
// groups, silences, status, receivers), what amtool and Grafana's
// Alertmanager data source call: 503 until Run serves and after it stops.
// A silence added or expired is on disk before the answer.
func (a *Alertmanager) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		inst := a.current.Load()
		if inst == nil {
			http.Error(w, "Alertmanager is not running\n", http.StatusServiceUnavailable)
			return
		}
		h, err := a.apiHandler(inst)
		if errors.Is(err, ErrNotRunning) {
			http.Error(w, "Alertmanager is not running\n", http.StatusServiceUnavailable)
			return
		}
		if err != nil {
			a.logger.Error("API v2 not built", "err", err)
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if r.Method == http.MethodGet && r.URL.Path == "/api/v2/status" {
			buf := &bufferedResponse{header: w.Header()}
			h.ServeHTTP(buf, r)
			a.ownStatus(buf)
			buf.flush(w)
			return
		}
		if r.Method == http.MethodGet || r.Method == http.MethodHead || !strings.HasPrefix(r.URL.Path, "/api/v2/silence") {
			h.ServeHTTP(w, r)
			return
		}
		buf := &bufferedResponse{header: w.Header()}
		h.ServeHTTP(buf, r)
		if _, err := a.silencesFile.write(); err != nil {
			a.logger.Error("Silences not written; a crash now would lose this change", "err", err)
		}
		buf.flush(w)
	})
}

// ownStatus makes /api/v2/status speak for the Alertmanager gpuscope
// embeds: its versionInfo.version is Alertmanager's release (the API reads
// the process-wide version, which is gpuscope's, and amtool warns on
// every command when its own version differs from it), and uptime is
// when this Alertmanager started, not when the API was first asked for
// (it is built on that request).
func (a *Alertmanager) ownStatus(b *bufferedResponse) {
	if b.code != 0 && b.code != http.StatusOK {
		return
	}
	var status map[string]json.RawMessage
	if err := json.Unmarshal(b.body.Bytes(), &status); err != nil {
		return
	}
	if v := ModuleVersion(); v != "" {
		var info map[string]any
		if err := json.Unmarshal(status["versionInfo"], &info); err == nil && info != nil {
			info["version"] = v
			status["versionInfo"], _ = json.Marshal(info)
		}
	}
	if !a.startTime.IsZero() {
		status["uptime"], _ = json.Marshal(strfmt.DateTime(a.startTime))
	}
	out, err := json.Marshal(status)
	if err != nil {
		return
	}
	b.body.Reset()
	b.body.Write(out)
	b.header.Del("Content-Length")
}

// ModuleVersion is the release of the Alertmanager module in this binary
// (e.g. 0.34.1), "" where the binary carries no module list (a test).
func ModuleVersion() string {
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
	}
	for _, m := range bi.Deps {
		if m.Path == "github.com/prometheus/alertmanager" {
			if m.Replace != nil {
				m = m.Replace
			}
			return strings.TrimPrefix(m.Version, "v")
		}
	}
	return ""
}

// bufferedResponse holds a response until flush, so that what must
// happen before the client hears back can happen after the handler.
type bufferedResponse struct {
	header http.Header
	code   int
	body   bytes.Buffer
}

func (b *bufferedResponse) Header() http.Header { return b.header }

func (b *bufferedResponse) Write(p []byte) (int, error) {
	if b.code == 0 {
		b.code = http.StatusOK
	}
	return b.body.Write(p)
}

func (b *bufferedResponse) WriteHeader(code int) {
	if b.code == 0 {
		b.code = code
	}
}

func (b *bufferedResponse) flush(w http.ResponseWriter) {
	if b.code == 0 {
		b.code = http.StatusOK
	}
	w.WriteHeader(b.code)
	_, _ = w.Write(b.body.Bytes())
}
