package dashboards

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestInterpolateLikeGrafana(t *testing.T) {
	now := time.Now()
	multi := Variable{Name: "id", Multi: true, IncludeAll: true}
	for _, tc := range []struct {
		name string
		sel  Selection
		want string
	}{
		{"one value of a multi variable: regex-escaped", Selection{Variable: multi, Values: []string{"/a.b"}}, `/a\\.b`},
		{"several values: an alternation", Selection{Variable: multi, Values: []string{"/x", "/y(1)"}}, `(/x|/y\\(1\\))`},
		{"All without a custom value: every option", Selection{Variable: multi, Values: []string{"0", "1"}, All: true}, `(0|1)`},
		{"All with a custom value", Selection{Variable: Variable{Multi: true, IncludeAll: true, AllValue: ".*"}, Values: []string{"0"}, All: true}, `.*`},
		{"single-value variable: only quotes and backslashes", Selection{Variable: Variable{}, Values: []string{`a.b'c\d`}}, `a.b\\'c\\d`},
		{"backslash in a multi value", Selection{Variable: multi, Values: []string{`a\b`}}, `a\\\\b`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.Equal(t, tc.want, tc.sel.Format())
		})
	}

	r := TimeRange{From: now.Add(-24 * time.Hour), To: now, MaxDataPoints: 1000, ScrapeInterval: 15 * time.Second}
	require.Equal(t, time.Minute, r.Interval(), "86.4s rounds to 1m")
	require.Equal(t, 75*time.Second, r.RateInterval(), "max(1m+15s, 4×15s)")
	short := TimeRange{From: now.Add(-5 * time.Minute), To: now, MaxDataPoints: 1000, ScrapeInterval: 15 * time.Second}
	require.Equal(t, 15*time.Second, short.Interval(), "never below the scrape interval")
	require.Equal(t, time.Minute, short.RateInterval(), "4 × scrape interval")

	got := Interpolate(`rate(x{gpu=~"$gpu", id=~"${id}"}[$__rate_interval]) / $__range_s + [[gpu]] $unknown`,
		map[string]Selection{"gpu": {Variable: multi, Values: []string{"0", "1"}}, "id": {Variable: multi, Values: []string{"/a"}}}, r)
	require.Equal(t, `rate(x{gpu=~"(0|1)", id=~"/a"}[1m15s]) / 86400 + (0|1) $unknown`, got)

	sel, label, err := LabelValuesQuery(`label_values(DCGM_FI_DEV_GPU_TEMP{instance=~"$instance"}, gpu)`)
	require.NoError(t, err)
	require.Equal(t, `DCGM_FI_DEV_GPU_TEMP{instance=~"$instance"}`, sel)
	require.Equal(t, "gpu", label)
	_, label, err = LabelValuesQuery(`label_values(job)`)
	require.NoError(t, err)
	require.Equal(t, "job", label)
	_, _, err = LabelValuesQuery(`query_result(up)`)
	require.ErrorContains(t, err, "unsupported variable query")
}
