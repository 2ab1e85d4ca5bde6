package dashboards

import (
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
)

// perInstance matches the series that a GPU in MIG mode has once per GPU
// instance (labels GPU_I_ID, GPU_I_PROFILE), raw or recorded by the
// built-in rules: framebuffer, DCGM_FI_PROF_*, the container attribution
// and the rules built on them (utilisation falls back to engine activity).
var perInstance = regexp.MustCompile(`(?i)^(DCGM_FI_DEV_FB_|DCGM_FI_PROF_|gpu:dcgm_fi_dev_fb_|gpu:dcgm_fi_prof_|gpu:dcgm_fi_dev_gpu_util:|gpuscope_gpu_container_|gpu:gpuscope_gpu_container_|gpu:container_cpu_saturation:|gpu:bottleneck:|gpu_workload:bottleneck:|gpu:memory_bandwidth_utilization:)`)

// TestMIGInstances: a target on per-instance series keeps MIG instances
// apart. Every by (...) or on (...) that names gpu also names GPU_I_ID,
// and a legend that names the GPU names the instance too, so two
// instances of one GPU neither merge, nor fail to match ("duplicate
// series for the match group"), nor draw under one legend.
func TestMIGInstances(t *testing.T) {
	set, err := Build()
	require.NoError(t, err)
	p := parser.NewParser(parser.Options{})
	var checked int
	for _, s := range set.List() {
		d, _ := set.Dashboard(s.UID)
		for _, panel := range allPanels(&d) {
			title := s.UID + " / " + *panel.Title
			for _, tg := range panel.Targets {
				q := tg.(prometheus.Dataquery)
				expr, err := p.ParseExpr(asPromQL(q.Expr))
				require.NoError(t, err, "%s: %s", title, q.Expr)
				var reads bool
				var groupings [][]string
				parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
					switch n := n.(type) {
					case *parser.VectorSelector:
						reads = reads || perInstance.MatchString(n.Name)
					case *parser.AggregateExpr:
						if !n.Without {
							groupings = append(groupings, n.Grouping)
						}
					case *parser.BinaryExpr:
						if n.VectorMatching != nil && n.VectorMatching.On {
							groupings = append(groupings, n.VectorMatching.MatchingLabels)
						}
					}
					return nil
				})
				if !reads {
					continue
				}
				checked++
				for _, g := range groupings {
					if slices.Contains(g, "gpu") {
						require.Contains(t, g, "GPU_I_ID", "%s: %s groups by GPU but not by MIG instance", title, q.Expr)
					}
				}
				if q.LegendFormat != nil && strings.Contains(*q.LegendFormat, "{{gpu}}") {
					require.Contains(t, *q.LegendFormat, "{{GPU_I_ID}}", "%s: legend %q", title, *q.LegendFormat)
					require.Contains(t, *q.LegendFormat, "{{GPU_I_PROFILE}}", "%s: legend %q", title, *q.LegendFormat)
				}
			}
		}
	}
	require.Greater(t, checked, 10, "targets on per-instance series")
}
