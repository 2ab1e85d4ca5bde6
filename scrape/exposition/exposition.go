// Package exposition serves a registry's metrics to a scraper, as
// promhttp.HandlerFor does, with what goes wrong said once per scrape.
package exposition

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// encodeErrorPrefix is the first argument promhttp gives its ErrorLog for
// a family it could not write.
const encodeErrorPrefix = "error encoding and sending metric family:"

// Handler serves g in the exposition format the scraper asks for. A
// collector that fails does not fail the page: the rest is served and the
// failure logged, as cAdvisor and dcgm-exporter do. A scraper that gives
// up mid-page (its scrape_timeout passed) makes every family left fail to
// write; promhttp logs each, a hundred lines for one slow scrape, so here
// they are one line that says how many families were not sent and why.
func Handler(g prometheus.Gatherer, logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		l := &scrapeLog{logger: logger}
		promhttp.HandlerFor(g, promhttp.HandlerOpts{
			ErrorHandling: promhttp.ContinueOnError,
			ErrorLog:      l,
		}).ServeHTTP(w, r)
		if l.unsent > 0 {
			logger.Warn("Scrape abandoned before the page was sent: the scraper closed the connection, usually because its scrape_timeout passed",
				"families_not_sent", l.unsent, "err", l.firstUnsent, "scraper", r.RemoteAddr)
		}
	})
}

// scrapeLog is promhttp's ErrorLog for one scrape.
type scrapeLog struct {
	logger *slog.Logger

	mu          sync.Mutex
	unsent      int
	firstUnsent string
}

func (l *scrapeLog) Println(v ...any) {
	if len(v) > 0 && v[0] == encodeErrorPrefix {
		l.mu.Lock()
		defer l.mu.Unlock()
		if l.unsent == 0 {
			l.firstUnsent = fmt.Sprint(v[1:]...)
		}
		l.unsent++
		return
	}
	l.logger.Warn(strings.TrimSuffix(fmt.Sprintln(v...), "\n"))
}
