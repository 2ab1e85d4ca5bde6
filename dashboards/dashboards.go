// Package dashboards builds gpuscope's Grafana dashboards with the
// grafana-foundation-sdk builders, and the provisioning files that load
// them into Grafana with gpuscope as their data source.
package dashboards

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"time"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"

	"github.com/gpuscope/gpuscope/rules"
)

// DatasourceUID is the uid of the data source `gpuscope grafana provision`
// creates. Every dashboard's `datasource` variable defaults to it, so
// provisioned dashboards work at once and imported ones offer a choice.
const DatasourceUID = "gpuscope"

// Stable dashboard uids: links and bookmarks to a dashboard survive
// re-imports and upgrades.
const (
	UIDGPUOverview = "gpuscope-gpu-overview"
	UIDWorkloads   = "gpuscope-containers" // the Containers dashboard's uid, kept for bookmarks
	UIDTriage      = "gpuscope-triage"
	UIDSelf        = "gpuscope-self"
)

// Summary is one entry of the dashboard list.
type Summary struct {
	UID   string `json:"uid"`
	Title string `json:"title"`
}

// Set is the built dashboards, rendered once: they depend on nothing at run
// time.
type Set struct {
	list []Summary
	json map[string][]byte
	byID map[string]dashboard.Dashboard
}

// Build builds every dashboard.
func Build() (*Set, error) {
	s := &Set{json: map[string][]byte{}, byID: map[string]dashboard.Dashboard{}}
	slow, err := slowRecordings()
	if err != nil {
		return nil, err
	}
	for _, b := range []*dashboard.DashboardBuilder{
		gpuOverview(),
		workloads(),
		triage(),
		self(),
	} {
		d, err := b.Build()
		if err != nil {
			return nil, fmt.Errorf("build dashboard: %w", err)
		}
		if d.Uid == nil || d.Title == nil {
			return nil, fmt.Errorf("dashboard without uid or title: %+v", d)
		}
		number(&d)
		if err := recordedResolution(&d, slow); err != nil {
			return nil, fmt.Errorf("dashboard %s: %w", *d.Uid, err)
		}
		j, err := json.MarshalIndent(d, "", "  ")
		if err != nil {
			return nil, fmt.Errorf("render dashboard %s: %w", *d.Uid, err)
		}
		s.list = append(s.list, Summary{UID: *d.Uid, Title: *d.Title})
		s.json[*d.Uid] = append(j, '\n')
		s.byID[*d.Uid] = d
	}
	sort.Slice(s.list, func(i, j int) bool { return s.list[i].Title < s.list[j].Title })
	return s, nil
}

// number gives every panel and row a unique id and every query a refId,
// in order, so the JSON is stable and Grafana needs to invent neither.
func number(d *dashboard.Dashboard) {
	var id uint32
	for i := range d.Panels {
		id++
		switch p := d.Panels[i]; {
		case p.Panel != nil:
			numberPanel(p.Panel, id)
		case p.RowPanel != nil:
			p.RowPanel.Id = id
			for j := range p.RowPanel.Panels {
				id++
				numberPanel(&p.RowPanel.Panels[j], id)
			}
		}
	}
}

func numberPanel(p *dashboard.Panel, id uint32) {
	p.Id = cog.ToPtr(id)
	for j, t := range p.Targets {
		if q, ok := t.(prometheus.Dataquery); ok && q.RefId == nil {
			q.RefId = cog.ToPtr(string(rune('A' + j)))
			p.Targets[j] = q
		}
	}
}

// allPanels lists every panel of d in order, those of collapsed rows too:
// Grafana keeps a collapsed row's panels inside the row, where a walk over
// the dashboard's top level would miss them.
func allPanels(d *dashboard.Dashboard) []*dashboard.Panel {
	var out []*dashboard.Panel
	for i := range d.Panels {
		switch p := d.Panels[i]; {
		case p.Panel != nil:
			out = append(out, p.Panel)
		case p.RowPanel != nil:
			for j := range p.RowPanel.Panels {
				out = append(out, &p.RowPanel.Panels[j])
			}
		}
	}
	return out
}

// slowRecordings maps each series recorded by a built-in rule group that
// runs less often than every scrape (the gpuscope.dashboard group's
// one-minute aggregates, the baselines) to its group's interval.
func slowRecordings() (map[string]time.Duration, error) {
	p := parser.NewParser(parser.Options{})
	out := map[string]time.Duration{}
	for _, f := range rules.Pack() {
		rgs, errs := rulefmt.Parse(f.Data, false, model.UTF8Validation, p, nil)
		if len(errs) > 0 {
			return nil, fmt.Errorf("parse built-in rules %s: %w", f.Name, errors.Join(errs...))
		}
		for _, g := range rgs.Groups {
			if g.Interval == 0 {
				continue
			}
			for _, r := range g.Rules {
				if r.Record != "" {
					out[r.Record] = time.Duration(g.Interval)
				}
			}
		}
	}
	return out, nil
}

// recordedResolution sets a panel's minimum interval to its data's
// resolution when all its queries read series recorded at a coarser
// interval than the scrape: Grafana then never asks for steps finer than
// the data, whatever the time range.
func recordedResolution(d *dashboard.Dashboard, slow map[string]time.Duration) error {
	p := parser.NewParser(parser.Options{})
	for _, panel := range allPanels(d) {
		if len(panel.Targets) == 0 {
			continue
		}
		var res time.Duration
		all := true
		for _, t := range panel.Targets {
			q, ok := t.(prometheus.Dataquery)
			if !ok {
				all = false
				break
			}
			expr, err := p.ParseExpr(grafanaMacros.ReplaceAllString(q.Expr, "1m"))
			if err != nil {
				return fmt.Errorf("panel %s: %w", *panel.Title, err)
			}
			for _, name := range metricNames(expr) {
				iv, ok := slow[name]
				if !ok {
					all = false
				}
				res = max(res, iv)
			}
		}
		if all && res > 0 {
			panel.Interval = cog.ToPtr(model.Duration(res).String())
		}
	}
	return nil
}

var grafanaMacros = regexp.MustCompile(`\$__[a-z_]+`)

func metricNames(e parser.Expr) []string {
	var names []string
	parser.Inspect(e, func(n parser.Node, _ []parser.Node) error {
		if vs, ok := n.(*parser.VectorSelector); ok {
			names = append(names, vs.Name)
		}
		return nil
	})
	return names
}

// List returns uid and title of every dashboard, by title.
func (s *Set) List() []Summary { return append([]Summary(nil), s.list...) }

// JSON returns a dashboard in the JSON Grafana's Dashboards → Import takes.
func (s *Set) JSON(uid string) ([]byte, bool) {
	j, ok := s.json[uid]
	return j, ok
}

// Dashboard returns the SDK model of a dashboard.
func (s *Set) Dashboard(uid string) (dashboard.Dashboard, bool) {
	d, ok := s.byID[uid]
	return d, ok
}
