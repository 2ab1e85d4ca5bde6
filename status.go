package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	promscrape "github.com/prometheus/prometheus/scrape"

	"github.com/gpuscope/gpuscope/web"
)

// statusSummary is what the status page says about GPUs, targets and
// alerts, read through the same PromQL engine and TSDB as the API, so a
// newcomer without Grafana sees at once whether anything is collected
// and whether anything fires.
func (a *appliance) statusSummary() []web.StatusLine {
	if a.engine == nil || a.ready.Get() == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	now := time.Now()
	instant := func(q string) (promql.Vector, error) {
		qry, err := a.engine.NewInstantQuery(ctx, a.fanout, nil, q, now)
		if err != nil {
			return nil, err
		}
		defer qry.Close()
		return qry.Exec(ctx).Vector()
	}
	var lines []web.StatusLine

	gpus := "none seen yet (first data one scrape interval after start)"
	if v, err := instant(`count by (instance) (count by (instance, gpu) (DCGM_FI_DEV_FB_TOTAL))`); err != nil {
		gpus = "query failed: " + err.Error()
	} else if len(v) > 0 {
		var parts []string
		for _, s := range v {
			parts = append(parts, fmt.Sprintf("%d on %s", int(s.F), s.Metric.Get("instance")))
		}
		slices.Sort(parts)
		gpus = strings.Join(parts, ", ")
	} else if v, err := instant(`gpuscope_gpu_collector_backend_info`); err == nil && len(v) > 0 {
		gpus = "none (backend " + v[0].Metric.Get("backend") + ")"
	}
	lines = append(lines, web.StatusLine{Name: "GPUs", Value: gpus})

	up, down := 0, []string{}
	lb := labels.NewBuilder(labels.EmptyLabels())
	for _, targets := range a.scraper.Manager().TargetsActive() {
		for _, t := range targets {
			if t.Health() == promscrape.HealthBad {
				l := t.Labels(lb)
				down = append(down, fmt.Sprintf("%s %s: %v", l.Get("job"), l.Get("instance"), t.LastError()))
				continue
			}
			up++
		}
	}
	slices.Sort(down)
	targets := fmt.Sprintf("%d up, %d down", up, len(down))
	if len(down) > 0 {
		targets += " (" + strings.Join(down, "; ") + ")"
	}
	lines = append(lines, web.StatusLine{Name: "Targets", Value: targets})

	alerts := "none firing"
	if v, err := instant(`ALERTS{alertstate="firing"}`); err != nil {
		alerts = "query failed: " + err.Error()
	} else if len(v) > 0 {
		var parts []string
		for _, s := range v {
			p := s.Metric.Get("alertname") + " on " + s.Metric.Get("instance")
			if g := s.Metric.Get("gpu"); g != "" {
				p += " gpu " + g
			}
			parts = append(parts, p)
		}
		slices.Sort(parts)
		alerts = fmt.Sprintf("%d firing: %s", len(v), strings.Join(parts, ", "))
	}
	lines = append(lines, web.StatusLine{Name: "Alerts", Value: alerts})
	return lines
}
