package accounting

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/prometheus/common/model"

	"github.com/gpuscope/gpuscope/workload"
)

// LabelPrefix marks a grouping by a label of the user's choosing:
// label:team groups by the label team.
const LabelPrefix = "label:"

// groupFields are the names a report groups by without LabelPrefix: the
// run's identity as the Run has it.
var groupFields = map[string]func(*Run) string{
	workload.LabelUser:           func(r *Run) string { return r.User },
	workload.LabelWorkload:       func(r *Run) string { return r.Workload },
	workload.LabelRuntime:        func(r *Run) string { return r.Runtime },
	workload.LabelImage:          func(r *Run) string { return r.Image },
	workload.LabelComposeProject: func(r *Run) string { return r.ComposeProject },
	workload.LabelComposeService: func(r *Run) string { return r.ComposeService },
	workload.LabelSlurmJobID:     func(r *Run) string { return r.SlurmJobID },
	workload.LabelSlurmUser:      func(r *Run) string { return r.SlurmUser },
	"instance":                   func(r *Run) string { return r.Instance },
}

// ParseGroupBy checks the names a report is grouped by, each given once:
// user, compose_project, workload, runtime, image, compose_service,
// slurm_job_id, slurm_user, instance, or label:<name> for any label. A
// value may list several, comma-separated. It returns the names, and
// the labels among them that the report must read (label:<name> for a
// name that is not one of the above).
func ParseGroupBy(values []string) (by, extraLabels []string, err error) {
	for _, v := range values {
		for name := range strings.SplitSeq(v, ",") {
			name = strings.TrimSpace(name)
			if name == "" {
				continue
			}
			if l, ok := strings.CutPrefix(name, LabelPrefix); ok {
				if !model.LegacyValidation.IsValidLabelName(l) || strings.HasPrefix(l, "__") {
					return nil, nil, fmt.Errorf("group by %q: %q is not a label name", name, l)
				}
				if _, known := groupFields[l]; known {
					name = l // label:user is user
				} else if !slices.Contains(extraLabels, l) {
					extraLabels = append(extraLabels, l)
				}
			} else if _, ok := groupFields[name]; !ok {
				return nil, nil, fmt.Errorf("cannot group by %q: one of %s, or label:<name> for any label", name, strings.Join(slices.Sorted(maps.Keys(groupFields)), ", "))
			}
			if slices.Contains(by, name) {
				return nil, nil, fmt.Errorf("group by %q given twice", name)
			}
			by = append(by, name)
		}
	}
	return by, extraLabels, nil
}

// groupValue is a run's value of a grouping name.
func groupValue(r *Run, name string) string {
	if f, ok := groupFields[name]; ok {
		return f(r)
	}
	return r.Labels[strings.TrimPrefix(name, LabelPrefix)]
}

// Group is a row of a grouped report: the runs whose values of the
// grouping names are Key's, and their sums. Energy, cost and CO₂ are the
// sums of the runs that have them, nil where none has.
type Group struct {
	// Key is each grouping name's value, "" where the runs have none
	// (a run whose user is not known groups under user "").
	Key  map[string]string `json:"group"`
	Runs int               `json:"runs"`

	GPUHours     float64 `json:"gpu_hours"`
	IdleGPUHours float64 `json:"idle_gpu_hours"`
	// SMShareAvg is the runs' average SM share weighted by their
	// GPU-hours: the mean share of the GPUs while they were held.
	SMShareAvg        float64  `json:"sm_share_avg"`
	GPUMemoryMaxBytes float64  `json:"gpu_memory_max_bytes"`
	EnergyKWh         *float64 `json:"energy_kwh"`
	Cost              *float64 `json:"cost,omitempty"`
	Currency          string   `json:"currency,omitempty"`
	CO2Grams          *float64 `json:"co2_grams,omitempty"`
	CPUCoreSeconds    float64  `json:"cpu_core_seconds"`
}

// GroupRuns sums runs by the values of by (as ParseGroupBy returns it).
// Each run is in exactly one group, so the groups' sums are the runs':
// nothing is read again. Groups come by GPU-hours, most first, then by
// key.
func GroupRuns(runs []Run, by []string) []Group {
	index := map[string]int{}
	var out []Group
	weighted := []float64{} // Σ SM share × GPU-hours, per group
	for i := range runs {
		r := &runs[i]
		key := make(map[string]string, len(by))
		var id strings.Builder
		for _, name := range by {
			v := groupValue(r, name)
			key[name] = v
			fmt.Fprintf(&id, "%q,", v)
		}
		gi, ok := index[id.String()]
		if !ok {
			gi = len(out)
			index[id.String()] = gi
			out = append(out, Group{Key: key})
			weighted = append(weighted, 0)
		}
		g := &out[gi]
		g.Runs++
		g.GPUHours += r.GPUHours
		g.IdleGPUHours += r.IdleGPUHours
		weighted[gi] += r.SMShareAvg * r.GPUHours
		g.GPUMemoryMaxBytes = max(g.GPUMemoryMaxBytes, r.GPUMemoryMaxBytes)
		g.EnergyKWh = addOpt(g.EnergyKWh, r.EnergyKWh)
		g.Cost = addOpt(g.Cost, r.Cost)
		g.CO2Grams = addOpt(g.CO2Grams, r.CO2Grams)
		g.Currency = cmp.Or(g.Currency, r.Currency)
		g.CPUCoreSeconds += r.CPUCoreSeconds
	}
	for i := range out {
		if out[i].GPUHours > 0 {
			out[i].SMShareAvg = weighted[i] / out[i].GPUHours
		}
	}
	slices.SortStableFunc(out, func(a, b Group) int {
		if c := cmp.Compare(b.GPUHours, a.GPUHours); c != 0 {
			return c
		}
		for _, name := range by {
			if c := cmp.Compare(a.Key[name], b.Key[name]); c != 0 {
				return c
			}
		}
		return 0
	})
	return out
}

func addOpt(sum, v *float64) *float64 {
	if v == nil {
		return sum
	}
	if sum == nil {
		x := *v
		return &x
	}
	x := *sum + *v
	return &x
}
