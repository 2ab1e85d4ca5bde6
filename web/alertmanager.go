package web

import (
	"net/http"

	"github.com/labstack/echo/v4"
)

// MountAlertmanager serves the embedded Alertmanager's API v2 at /api/v2/
// (alerts, alert groups, silences, status, receivers): for amtool and
// Grafana's Alertmanager data source, behind --web.config.file's TLS and
// authentication as every other endpoint. Its alerts endpoint is served
// on the self listener too, where the notifier posts without credentials.
// Call before Run.
func (h *Handler) MountAlertmanager(api http.Handler) {
	h.alerts = api
	h.echo.Any("/api/v2/*", echo.WrapHandler(api))
}

// selfHandler is what the self listener serves: the collectors'
// endpoints, and the embedded Alertmanager's alerts endpoint.
func (h *Handler) selfHandler() http.Handler {
	if h.alerts == nil {
		return h.metricsMux
	}
	mux := http.NewServeMux()
	mux.Handle("/", h.metricsMux)
	mux.Handle("POST /api/v2/alerts", h.alerts)
	return mux
}
