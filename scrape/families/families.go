// Package families decides which metric families the built-in collectors
// expose: the series diet. A default gpuscope stores only the families that
// a built-in rule, dashboard panel, alert, page or documented use reads;
// the rest are grouped, off by default, and each group can be turned back
// on in the config. The filter acts where the collectors are gathered, so a
// family that is off costs neither encoding, parsing nor a series in the
// TSDB, and an agent's endpoints shrink the same way for the appliance that
// scrapes them.
package families

import (
	"slices"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Group is a set of metric families turned on and off together by one
// config key.
type Group struct {
	// Key is the config key under the section's `families:`.
	Key string
	// Prefixes and Names select the group's families: a family belongs
	// to the group if its name starts with one of Prefixes or equals one
	// of Names, and is not in the section's kept list.
	Prefixes []string
	Names    []string
	// Why says what is lost with the group off, for the table in docs/metrics.md.
	Why string
}

func (g Group) has(name string) bool {
	if slices.Contains(g.Names, name) {
		return true
	}
	for _, p := range g.Prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// Section is the diet of one collector: its groups and the families that
// stay on whatever the groups say.
type Section struct {
	// Name is the config section, e.g. "cadvisor".
	Name   string
	Groups []Group
	// Kept are families inside a group's prefixes that something built in
	// reads, so they stay on when the group is off.
	Kept []string
}

// Keep reports whether the family name is exposed when only the groups
// for which on returns true are turned on. Families no group claims are
// always exposed.
func (s Section) Keep(name string, on func(key string) bool) bool {
	if slices.Contains(s.Kept, name) {
		return true
	}
	for _, g := range s.Groups {
		if g.has(name) && !on(g.Key) {
			return false
		}
	}
	return true
}

// Gatherer returns g with the families for which keep returns false left
// out. keep is called at every gather, so a config reload that changes it
// applies from the next scrape.
func Gatherer(g prometheus.Gatherer, keep func(name string) bool) prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		mfs, err := g.Gather()
		return slices.DeleteFunc(mfs, func(mf *dto.MetricFamily) bool { return !keep(mf.GetName()) }), err
	})
}
