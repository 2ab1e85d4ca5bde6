package web

import (
	"fmt"
	"html/template"
	"net/http"

	"github.com/labstack/echo/v4"
)

var statusTemplate = template.Must(template.New("status").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>gpuscope</title>
<style>body{font-family:system-ui,sans-serif;margin:2em;max-width:60em}td{padding:.2em 1em .2em 0;vertical-align:top}code{background:#f3f3f3;padding:0 .2em}</style>
</head><body>
<h1>gpuscope</h1>
<p>Status: <b>{{if .Ready}}ready{{else}}starting (TSDB opening, WAL replay){{end}}</b></p>
<table>{{range .Lines}}<tr><td>{{.Name}}</td><td><code>{{.Value}}</code></td></tr>{{end}}</table>
<h2>Endpoints</h2>
<ul>
{{if .API}}<li><a href="api/v1/targets">/api/v1/targets</a>: scrape targets and their health</li>
<li><a href="api/v1/rules">/api/v1/rules</a>, <a href="api/v1/alerts">/api/v1/alerts</a></li>
<li><a href="api/v1/status/config">/api/v1/status/config</a>, <a href="api/v1/status/tsdb">/api/v1/status/tsdb</a>, <a href="api/v1/status/buildinfo">/api/v1/status/buildinfo</a></li>
<li><a href="federate?match[]=up">/federate?match[]=…</a>: federation for another Prometheus</li>
<li><a href="api/dashboards">/api/dashboards</a>: the Grafana dashboards, as JSON to import (or run <code>gpuscope grafana provision</code>)</li>
{{end}}<li><a href="metrics">/metrics</a> (gpuscope itself), <a href="metrics/cadvisor">/metrics/cadvisor</a>, <a href="metrics/gpu">/metrics/gpu</a></li>
</ul>
</body></html>
`))

func (h *Handler) statusPage(c echo.Context) error {
	data := struct {
		Ready bool
		API   bool // false for `gpuscope agent`, which serves only /metrics*
		Lines []StatusLine
	}{Ready: h.ready.Load(), API: h.opts.API != nil}
	if h.opts.Status != nil {
		data.Lines = h.opts.Status()
	}
	c.Response().Header().Set(echo.HeaderContentType, echo.MIMETextHTMLCharsetUTF8)
	c.Response().WriteHeader(http.StatusOK)
	if err := statusTemplate.Execute(c.Response(), data); err != nil {
		return fmt.Errorf("render status page: %w", err)
	}
	return nil
}
