package dashboards

import (
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/rules"
)

// TestThresholdsAreTheAlertRules: a panel turns red exactly where the
// built-in alert on the same series fires. The alert thresholds are read
// from the embedded rule pack, not repeated here.
func TestThresholdsAreTheAlertRules(t *testing.T) {
	alertThreshold := alertThresholds(t)
	set, err := Build()
	require.NoError(t, err)
	for _, c := range []struct{ uid, panel, alert string }{
		{UIDGPUOverview, "GPU utilisation", "GPUSMUtilizationHigh"},
		{UIDGPUOverview, "Mean utilisation", "GPUSMUtilizationHigh"},
		{UIDGPUOverview, "Framebuffer used", "GPUMemoryAlmostFull"},
		{UIDGPUOverview, "Temperature", "GPUTemperatureHigh"},
		{UIDGPUOverview, "Hottest GPU", "GPUTemperatureHigh"},
		{UIDGPUOverview, "Utilisation by node", "GPUSMUtilizationHigh"},
		{UIDGPUOverview, "Fullest GPU framebuffer by node", "GPUMemoryAlmostFull"},
		{UIDGPUOverview, "Hottest GPU by node", "GPUTemperatureHigh"},
		{UIDGPUOverview, "PCIe utilisation", "PCIeBandwidthNearLimit"},
		{UIDWorkloads, "CPU saturation", "ContainerCPUSaturated"},
		{UIDWorkloads, "Memory near limit", "ContainerMemoryNearLimit"},
	} {
		want, ok := alertThreshold[c.alert]
		require.True(t, ok, "alert %s not in the pack", c.alert)
		d, _ := set.Dashboard(c.uid)
		var found bool
		for _, panel := range allPanels(&d) {
			if *panel.Title != c.panel {
				continue
			}
			found = true
			th := panel.FieldConfig.Defaults.Thresholds
			require.NotNil(t, th, "%s / %s has no thresholds", c.uid, c.panel)
			steps := th.Steps
			require.NotNil(t, steps[len(steps)-1].Value)
			require.Equal(t, want, *steps[len(steps)-1].Value, "%s / %s: red from the %s threshold", c.uid, c.panel, c.alert)
		}
		require.True(t, found, "panel %s / %s", c.uid, c.panel)
	}
}

// alertThresholds maps each alert of the pack to the number its
// expression compares against (the right-hand side of its first `>`).
func alertThresholds(t *testing.T) map[string]float64 {
	p := parser.NewParser(parser.Options{})
	out := map[string]float64{}
	for _, f := range rules.Pack() {
		rgs, errs := rulefmt.Parse(f.Data, false, model.UTF8Validation, p, nil)
		require.Empty(t, errs, f.Name)
		for _, g := range rgs.Groups {
			for _, r := range g.Rules {
				if r.Alert == "" {
					continue
				}
				expr, err := p.ParseExpr(r.Expr)
				require.NoError(t, err)
				parser.Inspect(expr, func(n parser.Node, _ []parser.Node) error {
					b, ok := n.(*parser.BinaryExpr)
					if !ok || b.Op != parser.GTR {
						return nil
					}
					if num, ok := b.RHS.(*parser.NumberLiteral); ok {
						if _, seen := out[r.Alert]; !seen {
							out[r.Alert] = num.Val
						}
					}
					return nil
				})
			}
		}
	}
	return out
}
