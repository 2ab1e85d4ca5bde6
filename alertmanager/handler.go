package alertmanager

import (
	"bytes"
	"errors"
	"net/http"
	"strings"
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
