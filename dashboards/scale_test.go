package dashboards

import (
	"slices"
	"strings"
	"testing"

	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"
)

// TestOpensOnNodesNotEntities: what Grafana queries when it opens a GPU or
// workload dashboard grows with the nodes, not with their GPUs and
// workloads. Every graph outside a collapsed row draws one line per node
// or fewer (an aggregation by instance or class, or a per-node instance:*
// series); the per-GPU and per-workload graphs sit in collapsed rows,
// which Grafana queries only once opened. Drawn on open, a day of a
// 64-node cluster's 512 GPUs or 640 workloads took seconds per dashboard
// (BENCHMARKS.md, "64 nodes × 8 GPUs on two cores"). Instant targets
// (tables of what is now) and gpuscope's own few series are not limited.
func TestOpensOnNodesNotEntities(t *testing.T) {
	set, err := Build()
	require.NoError(t, err)
	p := parser.NewParser(parser.Options{})
	var checked, collapsed int
	for _, uid := range []string{UIDGPUOverview, UIDTriage, UIDWorkloads} {
		d, ok := set.Dashboard(uid)
		require.True(t, ok, uid)
		for _, pr := range d.Panels {
			if pr.RowPanel != nil {
				require.True(t, pr.RowPanel.Collapsed || len(pr.RowPanel.Panels) == 0, "%s / %s: a row holding panels is collapsed", uid, *pr.RowPanel.Title)
				collapsed += len(pr.RowPanel.Panels)
				continue
			}
			for _, tg := range pr.Panel.Targets {
				q := tg.(prometheus.Dataquery)
				if q.Instant != nil && *q.Instant {
					continue
				}
				expr, err := p.ParseExpr(asPromQL(q.Expr))
				require.NoError(t, err, q.Expr)
				require.True(t, perNodeOrCoarser(expr), "%s / %s draws a line per GPU or workload on open: %s", uid, *pr.Panel.Title, q.Expr)
				checked++
			}
		}
	}
	require.GreaterOrEqual(t, checked, 5, "graphs on open")
	require.Greater(t, collapsed, 15, "panels in collapsed rows")
}

// perNodeOrCoarser reports whether e has at most one series per node (and
// bottleneck class).
func perNodeOrCoarser(e parser.Expr) bool {
	switch e := e.(type) {
	case *parser.NumberLiteral:
		return true
	case *parser.ParenExpr:
		return perNodeOrCoarser(e.Expr)
	case *parser.VectorSelector:
		return strings.HasPrefix(e.Name, "instance:")
	case *parser.AggregateExpr:
		if e.Without {
			return false
		}
		for _, l := range e.Grouping {
			if !slices.Contains([]string{"instance", "class"}, l) {
				return false
			}
		}
		return true
	case *parser.BinaryExpr:
		return perNodeOrCoarser(e.LHS) && perNodeOrCoarser(e.RHS)
	}
	return false
}
