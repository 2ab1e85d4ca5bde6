package app_test

import (
	"context"
	"fmt"

	"github.com/gpuscope/gpuscope/dashboards"
)

// resolve runs a query variable's label_values(...) against the API as
// Grafana does (/api/v1/label/<name>/values with match[]), after
// interpolating the variables it depends on.
func (p *process) resolve(ctx context.Context, v dashboards.Variable, earlier map[string]dashboards.Selection, r dashboards.TimeRange) ([]string, error) {
	q, _ := v.Query.(string)
	selector, label, err := dashboards.LabelValuesQuery(q)
	if err != nil {
		return nil, fmt.Errorf("variable %s: %w", v.Name, err)
	}
	var matches []string
	if selector != "" {
		matches = []string{dashboards.Interpolate(selector, earlier, r)}
	}
	vals, _, _, err := p.api().LabelValues(ctx, label, matches, r.From, r.To)
	if err != nil {
		return nil, fmt.Errorf("variable %s: %w", v.Name, err)
	}
	out := make([]string, 0, len(vals))
	for _, x := range vals {
		out = append(out, string(x))
	}
	return out, nil
}
