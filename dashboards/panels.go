package dashboards

import (
	"github.com/grafana/grafana-foundation-sdk/go/cog"
	"github.com/grafana/grafana-foundation-sdk/go/common"
	"github.com/grafana/grafana-foundation-sdk/go/dashboard"
	"github.com/grafana/grafana-foundation-sdk/go/prometheus"
	"github.com/grafana/grafana-foundation-sdk/go/stat"
	"github.com/grafana/grafana-foundation-sdk/go/table"
	"github.com/grafana/grafana-foundation-sdk/go/timeseries"
)

// datasource is what every panel and variable queries: the dashboard's
// `datasource` variable, defaulting to gpuscope's provisioned data source.
var datasource = common.DataSourceRef{Type: cog.ToPtr("prometheus"), Uid: cog.ToPtr("${datasource}")}

// Grafana unit ids used below.
const (
	unitPercent     = "percent"     // 0-100
	unitPercentUnit = "percentunit" // 0-1
	unitMiB         = "mbytes"      // DCGM reports framebuffer in MiB
	unitBytes       = "bytes"
	unitBytesPerSec = "Bps"
	unitCelsius     = "celsius"
	unitWatt        = "watt"
	unitHertz       = "hertz"
	unitSeconds     = "s"
	unitCores       = "short"
	unitCount       = "short"
	unitOpsPerSec   = "ops"
)

// target is one PromQL query of a panel.
func target(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().
		Datasource(datasource).
		Expr(expr).
		LegendFormat(legend).
		Range()
}

// instantTarget is a query evaluated at the end of the range (tables).
func instantTarget(expr, legend string) *prometheus.DataqueryBuilder {
	return prometheus.NewDataqueryBuilder().
		Datasource(datasource).
		Expr(expr).
		LegendFormat(legend).
		Format(prometheus.PromQueryFormatTable).
		Instant()
}

// thresholds colours values from base upward; the steps are the alert
// rules' thresholds, so a panel turns red where an alert would fire.
func thresholds(steps ...float64) *dashboard.ThresholdsConfigBuilder {
	colors := []string{"green", "orange", "red"}
	ts := []dashboard.Threshold{{Value: nil, Color: colors[0]}}
	for i, v := range steps {
		c := colors[len(colors)-1]
		if i+1 < len(colors)-1 && len(steps) > 1 {
			c = colors[i+1]
		}
		ts = append(ts, dashboard.Threshold{Value: cog.ToPtr(v), Color: c})
	}
	return dashboard.NewThresholdsConfigBuilder().Mode(dashboard.ThresholdsModeAbsolute).Steps(ts)
}

// timeseriesPanel is a graph with a table legend showing last and max.
func timeseriesPanel(title, description, unit string, targets ...*prometheus.DataqueryBuilder) *timeseries.PanelBuilder {
	p := timeseries.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource).
		Unit(unit).
		Height(8).
		Span(12).
		Legend(common.NewVizLegendOptionsBuilder().
			DisplayMode(common.LegendDisplayModeTable).
			Placement(common.LegendPlacementBottom).
			ShowLegend(true).
			Calcs([]string{"lastNotNull", "max"})).
		Tooltip(common.NewVizTooltipOptionsBuilder().Mode(common.TooltipDisplayModeMulti).Sort(common.SortOrderDescending))
	for _, t := range targets {
		p.WithTarget(t)
	}
	return p
}

// nowStatPanel is a single value now, without a sparkline: one instant
// query, for stats whose history a graph beside them already draws.
func nowStatPanel(title, description, unit, expr, legend string) *stat.PanelBuilder {
	return statPanel(title, description, unit,
		prometheus.NewDataqueryBuilder().Datasource(datasource).Expr(expr).LegendFormat(legend).Instant()).
		GraphMode(common.BigValueGraphModeNone)
}

// statPanel is a single value.
func statPanel(title, description, unit string, t *prometheus.DataqueryBuilder) *stat.PanelBuilder {
	return stat.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource).
		Unit(unit).
		Height(4).
		Span(6).
		GraphMode(common.BigValueGraphModeArea).
		ColorMode(common.BigValueColorModeValue).
		ReduceOptions(common.NewReduceDataOptionsBuilder().Calcs([]string{"lastNotNull"})).
		WithTarget(t)
}

// tablePanel lists instant results, one row per series.
func tablePanel(title, description, unit string, targets ...*prometheus.DataqueryBuilder) *table.PanelBuilder {
	p := table.NewPanelBuilder().
		Title(title).
		Description(description).
		Datasource(datasource).
		Unit(unit).
		Height(8).
		Span(12).
		// Grafana's schema requires a reducer even with the footer hidden.
		Footer(common.NewTableFooterOptionsBuilder().Show(false).Reducer([]string{"sum"}))
	for _, t := range targets {
		p.WithTarget(t)
	}
	return p
}

// datasourceVariable lets an imported dashboard pick any Prometheus data
// source; provisioned ones start on gpuscope's.
func datasourceVariable() *dashboard.DatasourceVariableBuilder {
	return dashboard.NewDatasourceVariableBuilder("datasource").
		Label("Data source").
		Type("prometheus").
		Current(dashboard.VariableOption{
			Text:  dashboard.StringOrArrayOfString{String: cog.ToPtr(DatasourceUID)},
			Value: dashboard.StringOrArrayOfString{String: cog.ToPtr(DatasourceUID)},
		})
}

// labelVariable is a multi-value variable over a label's values, with All.
func labelVariable(name, label, query string) *dashboard.QueryVariableBuilder {
	return dashboard.NewQueryVariableBuilder(name).
		Label(label).
		Datasource(datasource).
		Query(dashboard.StringOrMap{String: cog.ToPtr(query)}).
		Definition(query).
		Refresh(dashboard.VariableRefreshOnTimeRangeChanged).
		Sort(dashboard.VariableSortNaturalAsc).
		Multi(true).
		IncludeAll(true).
		Current(dashboard.VariableOption{
			Text:  dashboard.StringOrArrayOfString{ArrayOfString: []string{"All"}},
			Value: dashboard.StringOrArrayOfString{ArrayOfString: []string{"$__all"}},
		})
}

// newDashboard sets what every gpuscope dashboard shares.
func newDashboard(uid, title, description string) *dashboard.DashboardBuilder {
	return dashboard.NewDashboardBuilder(title).
		Uid(uid).
		Description(description).
		Tags([]string{"gpuscope"}).
		Editable().
		Refresh("30s").
		Time("now-6h", "now").
		Timezone(common.TimeZoneBrowser).
		Tooltip(dashboard.DashboardCursorSyncCrosshair).
		Link(dashboard.NewDashboardLinkBuilder("gpuscope").
			Type(dashboard.DashboardLinkTypeDashboards).
			Tags([]string{"gpuscope"}).
			AsDropdown(true).
			IncludeVars(true).
			KeepTime(true))
}

// stackingNormal stacks a graph's series.
func stackingNormal() *common.StackingConfigBuilder {
	return common.NewStackingConfigBuilder().Mode(common.StackingModeNormal)
}
