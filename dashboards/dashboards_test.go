package dashboards

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/cog/plugins"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"
)

var update = flag.Bool("update", false, "rewrite testdata/*.json from the builders")

// TestGolden keeps every dashboard's JSON in testdata, so a change to a
// builder shows in review as a change to the JSON Grafana gets.
// Regenerate with: go test ./dashboards -run TestGolden -update
func TestGolden(t *testing.T) {
	set, err := Build()
	require.NoError(t, err)
	for _, d := range set.List() {
		got, _ := set.JSON(d.UID)
		p := filepath.Join("testdata", d.UID+".json")
		if *update {
			require.NoError(t, os.WriteFile(p, got, 0o644))
		}
		want, err := os.ReadFile(p)
		require.NoError(t, err, "missing golden file; run with -update")
		require.Equal(t, string(want), string(got), "%s differs from %s; run with -update if intended", d.UID, p)
	}
}

// TestRoundTrip: each dashboard's JSON decodes strictly into the SDK's
// dashboard type and encodes back to the same bytes, so nothing in it is
// unknown to Grafana's schema.
func TestRoundTrip(t *testing.T) {
	plugins.RegisterDefaultPlugins()
	set, err := Build()
	require.NoError(t, err)
	for _, d := range set.List() {
		j, _ := set.JSON(d.UID)
		// The strict decoder rejects fields Grafana's schema lacks and
		// required ones missing; the plain one (the SDK's documented way)
		// builds the value that must encode back to the same JSON.
		var strictly dashboard.Dashboard
		require.NoError(t, strict(strictly.UnmarshalJSONStrict(j)), d.UID)
		var back dashboard.Dashboard
		require.NoError(t, json.Unmarshal(j, &back), d.UID)
		again, err := json.MarshalIndent(back, "", "  ")
		require.NoError(t, err)
		require.JSONEq(t, string(j), string(again), d.UID)
	}
}

// strict undoes an SDK quirk: UnmarshalJSONStrict returns an empty
// cog.BuildErrors, a non-nil error, when there is nothing wrong.
func strict(err error) error {
	var be cog.BuildErrors
	if errors.As(err, &be) && len(be) == 0 {
		return nil
	}
	return err
}

var grafanaVars = regexp.MustCompile(`\$(__rate_interval|__interval|__range|instance|gpu|runtime|workload)\b`)

// asPromQL replaces a target's Grafana variables with values PromQL parses:
// a duration for the $__ macros, ".*" for the dashboard's variables.
func asPromQL(expr string) string {
	return grafanaVars.ReplaceAllStringFunc(expr, func(v string) string {
		if strings.HasPrefix(v, "$__") {
			return "5m"
		}
		return ".*"
	})
}

// TestPanels checks what every panel must have: a unique stable uid per
// dashboard, a unit, queries on the datasource variable, refIds, and
// PromQL that parses once Grafana's variables are substituted.
func TestPanels(t *testing.T) {
	set, err := Build()
	require.NoError(t, err)
	require.Len(t, set.List(), 4)
	promql := parser.NewParser(parser.Options{})
	for _, s := range set.List() {
		d, _ := set.Dashboard(s.UID)
		require.True(t, strings.HasPrefix(s.UID, "gpuscope-"), s.UID)
		require.Equal(t, "datasource", d.Templating.List[0].Name, "%s: the first variable picks the data source", s.UID)
		ids := map[uint32]bool{}
		for _, pr := range d.Panels {
			if pr.RowPanel != nil {
				require.False(t, ids[pr.RowPanel.Id])
				ids[pr.RowPanel.Id] = true
			}
		}
		for _, p := range allPanels(&d) {
			title := s.UID + " / " + *p.Title
			require.NotNil(t, p.Id, title)
			require.False(t, ids[*p.Id], "duplicate panel id in %s", title)
			ids[*p.Id] = true
			require.NotNil(t, p.FieldConfig, title)
			require.NotNil(t, p.FieldConfig.Defaults.Unit, "%s has no unit", title)
			require.NotEmpty(t, *p.FieldConfig.Defaults.Unit, "%s has no unit", title)
			require.NotEmpty(t, p.Targets, title)
			for _, tg := range p.Targets {
				q, ok := tg.(prometheus.Dataquery)
				require.True(t, ok, title)
				require.Equal(t, "${datasource}", *q.Datasource.Uid, title)
				require.NotNil(t, q.RefId, title)
				_, err := promql.ParseExpr(asPromQL(q.Expr))
				require.NoError(t, err, "%s: %s", title, q.Expr)
			}
		}
	}
}

func TestProvision(t *testing.T) {
	set, err := Build()
	require.NoError(t, err)
	dir := t.TempDir()
	files, err := Provision(set, dir, ProvisionOptions{URL: "http://gpuscope:9089/", ScrapeInterval: 15e9})
	require.NoError(t, err)
	require.Len(t, files, 2+len(set.List()))

	var ds struct {
		APIVersion  int `yaml:"apiVersion"`
		Datasources []struct {
			Name, Type, UID, Access, URL string
			JSONData                     map[string]any `yaml:"jsonData"`
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "provisioning/datasources/gpuscope.yaml"))
	require.NoError(t, err)
	dec := yaml.NewDecoder(bytes.NewReader(b))
	require.NoError(t, dec.Decode(&ds))
	require.Equal(t, 1, ds.APIVersion)
	require.Len(t, ds.Datasources, 1)
	got := ds.Datasources[0]
	require.Equal(t, "prometheus", got.Type)
	require.Equal(t, DatasourceUID, got.UID)
	require.Equal(t, "proxy", got.Access)
	require.Equal(t, "http://gpuscope:9089", got.URL)
	require.Equal(t, "POST", got.JSONData["httpMethod"])
	require.Equal(t, "Prometheus", got.JSONData["prometheusType"])
	require.Regexp(t, `^\d+\.\d+\.\d+$`, got.JSONData["prometheusVersion"])
	require.Equal(t, "15s", got.JSONData["timeInterval"])

	var prov struct {
		APIVersion int `yaml:"apiVersion"`
		Providers  []struct {
			Name, Type string
			Options    map[string]string
		}
	}
	b, err = os.ReadFile(filepath.Join(dir, "provisioning/dashboards/gpuscope.yaml"))
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &prov))
	require.Equal(t, 1, prov.APIVersion)
	require.Equal(t, "file", prov.Providers[0].Type)
	require.Equal(t, "/etc/grafana/provisioning/dashboards/gpuscope", prov.Providers[0].Options["path"])

	// Every provisioned dashboard defaults to the provisioned data source.
	for _, s := range set.List() {
		j, err := os.ReadFile(filepath.Join(dir, "provisioning/dashboards/gpuscope", s.UID+".json"))
		require.NoError(t, err)
		var d struct {
			Templating struct {
				List []struct {
					Name, Type string
					Current    struct{ Value any }
				}
			}
		}
		require.NoError(t, json.Unmarshal(j, &d))
		require.Equal(t, "datasource", d.Templating.List[0].Name)
		require.Equal(t, DatasourceUID, d.Templating.List[0].Current.Value, s.UID)
	}

	_, err = Provision(set, dir, ProvisionOptions{ScrapeInterval: 15e9})
	require.ErrorContains(t, err, "--url")

	// A URL without a scheme is refused before anything is written: Grafana
	// would keep it and fail every query.
	empty := t.TempDir()
	for _, bad := range []string{"localhost:9089", "gpuscope:9089", "ftp://gpuscope:9089", "http://"} {
		_, err = Provision(set, empty, ProvisionOptions{URL: bad, ScrapeInterval: 15e9})
		require.ErrorContains(t, err, `--url "`+bad+`" is not an http:// or https:// address`)
	}
	entries, err := os.ReadDir(empty)
	require.NoError(t, err)
	require.Empty(t, entries)
}

func TestIsLoopbackURL(t *testing.T) {
	for u, want := range map[string]bool{
		"http://localhost:9089":       true,
		"http://127.0.0.1:9089":       true,
		"http://127.1.2.3:9089":       true,
		"http://[::1]:9089":           true,
		"http://gpuscope:9089":        false,
		"http://10.0.0.7:9089":        false,
		"http://host.docker.internal": false,
	} {
		require.Equal(t, want, IsLoopbackURL(u), u)
	}
}

// Test binaries carry no module list, so PrometheusVersion falls back to a
// valid semver here; e2e checks the real binary reports 3.16.0.
func TestPrometheusVersionIsSemver(t *testing.T) {
	require.Regexp(t, `^3\.\d+\.\d+$`, PrometheusVersion())
}
