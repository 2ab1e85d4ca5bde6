package web

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql"
	"github.com/prometheus/prometheus/storage"
)

// gpuKey are the labels that name one GPU: one card per value.
var gpuKey = []string{"instance", "gpu", "UUID"}

// aggQuery is one of the overview's queries, in the one shape they all
// have: an aggregation by labels over one selector, scaled, and kept only
// where it equals 1 when eq1 is set. It writes PromQL with the page's
// ?node= matcher added to its selector; alternatives are joined with `or`.
type aggQuery struct {
	op    string   // a PromQL aggregation: max, sum, avg, group, ...
	by    []string // grouping labels
	names []string // metric names, summed by sum
	match []*labels.Matcher
	scale float64 // 0 means 1
	eq1   bool
}

// fieldQuery is one or more aggQueries joined with `or`.
type fieldQuery []aggQuery

func gpuBy(extra ...string) []string { return append(append([]string(nil), gpuKey...), extra...) }

var migInstance = labels.MustNewMatcher(labels.MatchNotEqual, "GPU_I_ID", "")

// The page's queries. A MIG GPU has no DCGM_FI_DEV_GPU_UTIL: the average
// activity of its GPU instances stands in, as in gpu:dcgm_fi_dev_gpu_util:avg5m;
// its framebuffer is the sum of its instances'. Memory is shown in bytes
// (DCGM's MiB times 2^20); where DCGM_FI_DEV_FB_TOTAL is not exported
// (dcgm-exporter's default counters) the total is used + free + reserved.
var (
	qCards = fieldQuery{{op: "group", by: gpuBy("modelName"), names: []string{
		"DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_XID_ERRORS"}}}
	qUtil = fieldQuery{
		{op: "max", by: gpuKey, names: []string{"DCGM_FI_DEV_GPU_UTIL"}},
		{op: "avg", by: gpuKey, names: []string{"DCGM_FI_PROF_GR_ENGINE_ACTIVE"}, match: []*labels.Matcher{migInstance}, scale: 100},
	}
	qMemUsed  = fieldQuery{{op: "sum", by: gpuKey, names: []string{"DCGM_FI_DEV_FB_USED"}, scale: 1 << 20}}
	qMemTotal = fieldQuery{
		{op: "sum", by: gpuKey, names: []string{"DCGM_FI_DEV_FB_TOTAL"}, scale: 1 << 20},
		{op: "sum", by: gpuKey, names: []string{"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED"}, scale: 1 << 20},
	}
	qTemp     = fieldQuery{{op: "max", by: gpuKey, names: []string{"DCGM_FI_DEV_GPU_TEMP"}}}
	qPower    = fieldQuery{{op: "max", by: gpuKey, names: []string{"DCGM_FI_DEV_POWER_USAGE"}}}
	qThrottle = fieldQuery{{op: "max", by: gpuBy("reason"), names: []string{"gpuscope_gpu_clock_event_active"}, eq1: true}}
	qXID      = fieldQuery{{op: "max", by: gpuBy("err_code", "err_msg"), names: []string{"DCGM_FI_DEV_XID_ERRORS"}}}
	qClass    = fieldQuery{{op: "max", by: gpuBy("GPU_I_ID", "class"), names: []string{"gpu:bottleneck:class"}}}
	qWLMem    = fieldQuery{{op: "sum", by: gpuBy("workload"), names: []string{"gpuscope_gpu_container_memory_used_bytes"}}}
	qWLSM     = fieldQuery{{op: "sum", by: gpuBy("workload"), names: []string{"gpuscope_gpu_container_sm_utilization_percent"}}}
	qNodes    = fieldQuery{{op: "group", by: []string{"instance"}, names: []string{"up"}}}
	// qBackend says why a node has no GPU card (backend none, or sim with
	// no GPU configured).
	qBackend = fieldQuery{{op: "group", by: []string{"backend"}, names: []string{"gpuscope_gpu_collector_backend_info"}}}
)

// promQL writes q, with extra matchers added to every selector.
func (q fieldQuery) promQL(extra ...*labels.Matcher) string {
	parts := make([]string, len(q))
	for i, a := range q {
		parts[i] = a.promQL(extra)
	}
	return strings.Join(parts, " or ")
}

func (a aggQuery) promQL(extra []*labels.Matcher) string {
	var sel strings.Builder
	if len(a.names) == 1 {
		sel.WriteString(a.names[0])
	}
	var ms []string
	if len(a.names) > 1 {
		ms = append(ms, "__name__=~"+strconv.Quote(strings.Join(a.names, "|")))
	}
	for _, m := range append(append([]*labels.Matcher(nil), a.match...), extra...) {
		ms = append(ms, m.Name+m.Type.String()+strconv.Quote(m.Value))
	}
	if len(ms) > 0 {
		sel.WriteString("{" + strings.Join(ms, ", ") + "}")
	}
	s := fmt.Sprintf("%s by (%s) (%s)", a.op, strings.Join(a.by, ", "), sel.String())
	if a.scale != 0 && a.scale != 1 {
		s += " * " + strconv.FormatFloat(a.scale, 'f', -1, 64)
	}
	if a.eq1 {
		s += " == 1"
	}
	return s
}

// sample is one element of an instant vector.
type sample struct {
	labels labels.Labels
	v      float64
}

// point is one step of a range query.
type point struct {
	t int64
	v float64
}

// errTimedOut is what a card says when its query ran past the page's
// query timeout.
var errTimedOut = errors.New("query timed out")

// engineSource answers the page's queries with the PromQL engine at one
// evaluation time: over the storage that /api/v1/query reads in serve, and
// over one gathering of the GPU collector (gathered) in `gpuscope agent`.
type engineSource struct {
	engine    promql.QueryEngine
	queryable storage.Queryable
	ts        time.Time
	timeout   time.Duration
}

func (s engineSource) instant(ctx context.Context, q fieldQuery, extra []*labels.Matcher) ([]sample, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	qry, err := s.engine.NewInstantQuery(ctx, s.queryable, nil, q.promQL(extra...), s.ts)
	if err != nil {
		return nil, fmt.Errorf("parse query: %w", err)
	}
	defer qry.Close()
	res := qry.Exec(ctx)
	if res.Err != nil {
		return nil, queryErr(res.Err)
	}
	vec, err := res.Vector()
	if err != nil {
		return nil, err
	}
	out := make([]sample, len(vec))
	for i, s := range vec {
		out[i] = sample{labels: s.Metric, v: s.F}
	}
	return out, nil
}

// series runs the sparklines' range query, keyed by card.
func (s engineSource) series(ctx context.Context, expr string, sr sparkRange) (map[string][]point, error) {
	m, err := s.matrix(ctx, expr, sr.start, sr.end(), sr.step)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]point, len(m))
	for _, s := range m {
		out[cardKey(s.labels)] = s.points
	}
	return out, nil
}

func queryErr(err error) error {
	var timeout promql.ErrQueryTimeout
	if errors.As(err, &timeout) || errors.Is(err, context.DeadlineExceeded) {
		return errTimedOut
	}
	return err
}

// cardKey is the key of a GPU's card in the query results.
func cardKey(ls labels.Labels) string {
	return ls.Get("instance") + "\xff" + ls.Get("gpu") + "\xff" + ls.Get("UUID")
}
