package families

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
)

func TestSectionKeep(t *testing.T) {
	s := Section{
		Groups: []Group{{Key: "engine", Prefixes: []string{"prometheus_engine_"}}, {Key: "swap", Names: []string{"container_memory_swap"}}},
		Kept:   []string{"prometheus_engine_queries"},
	}
	off := func(string) bool { return false }
	on := func(key string) bool { return key == "engine" }
	for _, tc := range []struct {
		name            string
		whenOff, whenOn bool
	}{
		{"prometheus_engine_query_duration_seconds", false, true},
		{"prometheus_engine_queries", true, true},   // kept inside the group
		{"container_memory_swap", false, false},     // its group stays off
		{"container_memory_swap_total", true, true}, // Names match exactly
		{"prometheus_tsdb_head_series", true, true}, // in no group
	} {
		require.Equal(t, tc.whenOff, s.Keep(tc.name, off), tc.name)
		require.Equal(t, tc.whenOn, s.Keep(tc.name, on), tc.name)
	}
}

// TestGroupKeysAreConfigKeys: every group's key is a yaml key of its
// config struct and On answers for it, so a group cannot be impossible
// to turn on.
func TestGroupKeysAreConfigKeys(t *testing.T) {
	for _, tc := range []struct {
		section Section
		typ     reflect.Type
		on      func(all bool) func(string) bool
	}{
		{CadvisorSection, reflect.TypeFor[Cadvisor](), func(all bool) func(string) bool {
			c := Cadvisor{MemoryDetail: all, CPUDetail: all, NetworkDetail: all, PressureDetail: all, DiskDetail: all, SpecDetail: all}
			return c.On
		}},
		{SelfSection, reflect.TypeFor[Self](), func(all bool) func(string) bool {
			s := Self{GoRuntime: all, QueryEngine: all, TSDBDetail: all, ScrapeDetail: all, RuleDetail: all, HTTP: all, AlertmanagerDetail: all}
			return s.On
		}},
	} {
		var tags []string
		for f := range tc.typ.Fields() {
			tags = append(tags, strings.Split(f.Tag.Get("yaml"), ",")[0])
		}
		var keys []string
		for _, g := range tc.section.Groups {
			keys = append(keys, g.Key)
			require.True(t, tc.on(true)(g.Key), "%s.%s: On answers true when its field is set", tc.section.Name, g.Key)
			require.False(t, tc.on(false)(g.Key), "%s.%s", tc.section.Name, g.Key)
		}
		slices.Sort(tags)
		slices.Sort(keys)
		require.Equal(t, tags, keys, "%s: one group per config field", tc.section.Name)
	}
}

func TestGatherer(t *testing.T) {
	reg := prometheus.NewRegistry()
	for _, n := range []string{"a_total", "b_total", "c_total"} {
		reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: n, Help: n}))
	}
	g := Gatherer(reg, func(name string) bool { return name != "b_total" })
	mfs, err := g.Gather()
	require.NoError(t, err)
	var names []string
	for _, mf := range mfs {
		names = append(names, mf.GetName())
	}
	require.Equal(t, []string{"a_total", "c_total"}, names)

	// A gather error is passed on with what was gathered, as promhttp's
	// ContinueOnError expects.
	failing := prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		n1, n2 := "kept", "dropped"
		return []*dto.MetricFamily{{Name: &n1}, {Name: &n2}}, errors.New("one collector failed")
	})
	mfs, err = Gatherer(failing, func(name string) bool { return name == "kept" }).Gather()
	require.EqualError(t, err, "one collector failed")
	require.Len(t, mfs, 1)
	require.Equal(t, "kept", mfs[0].GetName())
}
