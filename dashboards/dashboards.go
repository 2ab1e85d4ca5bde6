// Package dashboards builds gpuscope's Grafana dashboards with the
// grafana-foundation-sdk builders, and the provisioning files that load
// them into Grafana with gpuscope as their data source.
package dashboards

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
)

// DatasourceUID is the uid of the data source `gpuscope grafana provision`
// creates. Every dashboard's `datasource` variable defaults to it, so
// provisioned dashboards work at once and imported ones offer a choice.
const DatasourceUID = "gpuscope"

// Stable dashboard uids: links and bookmarks to a dashboard survive
// re-imports and upgrades.
const (
	UIDGPUOverview = "gpuscope-gpu-overview"
	UIDContainers  = "gpuscope-containers"
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
	for _, b := range []*dashboard.DashboardBuilder{
		gpuOverview(),
		containers(),
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
			p.Panel.Id = cog.ToPtr(id)
			for j, t := range p.Panel.Targets {
				if q, ok := t.(prometheus.Dataquery); ok && q.RefId == nil {
					q.RefId = cog.ToPtr(string(rune('A' + j)))
					p.Panel.Targets[j] = q
				}
			}
		case p.RowPanel != nil:
			p.RowPanel.Id = id
		}
	}
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
