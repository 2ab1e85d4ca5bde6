package web

import (
	"context"
	"fmt"
	"math"
	"net/url"
	"strings"

	"github.com/prometheus/prometheus/template"
)

// unit is how a graph's values are written: Prometheus's template
// functions humanize (SI prefixes) or humanize1024 (binary prefixes),
// and a suffix.
type unit struct {
	binary bool
	suffix string
	// fixed100 draws the axis from 0 to 100 (percentages).
	fixed100 bool
}

var (
	unitPercent = unit{suffix: "%", fixed100: true}
	unitBytes   = unit{binary: true, suffix: "B"}
	unitBytesPS = unit{suffix: "B/s"}
	unitCelsius = unit{suffix: "°C"}
	unitWatts   = unit{suffix: "W"}
	unitHertz   = unit{suffix: "Hz"}
	unitCores   = unit{suffix: " cores"}
	unitNone    = unit{}
)

// humanizer writes many values with Prometheus's own humanize and
// humanize1024 (prometheus/template, what alert annotations use), in one
// template expansion per page: the functions are not exported, and
// expanding a template per value would parse it each time.
type humanizer struct {
	reqs []humanizeReq
	out  []string
}

type humanizeReq struct {
	V      float64
	Binary bool
}

// humanizeTemplate writes each request on a line of its own.
const humanizeTemplate = `{{range .}}{{if .Binary}}{{humanize1024 .V}}{{else}}{{humanize .V}}{{end}}
{{end}}`

// addIn asks for v written in u; the index returned reads it after run.
func (h *humanizer) addIn(v float64, u unit) int {
	h.reqs = append(h.reqs, humanizeReq{V: v, Binary: u.binary})
	return len(h.reqs) - 1
}

// run writes every value asked for.
func (h *humanizer) run() error {
	if len(h.reqs) == 0 {
		return nil
	}
	e := template.NewTemplateExpander(context.Background(), humanizeTemplate, "humanize", h.reqs, 0, nil, &url.URL{}, nil)
	s, err := e.Expand()
	if err != nil {
		return fmt.Errorf("humanize values: %w", err)
	}
	h.out = strings.Split(s, "\n")
	if len(h.out) < len(h.reqs) {
		return fmt.Errorf("humanize values: %d lines for %d values", len(h.out), len(h.reqs))
	}
	return nil
}

// get is the value asked for at i, with u's suffix: 21.5GiB, 1.98GHz.
func (h *humanizer) get(i int, u unit) string {
	if s := h.out[i]; s != "NaN" {
		return s + u.suffix
	}
	return "NaN"
}

// humanizeOne writes one value, for the few outside a page's batch.
func humanizeOne(v float64, u unit) string {
	if math.IsNaN(v) {
		return "NaN"
	}
	var h humanizer
	i := h.addIn(v, u)
	if err := h.run(); err != nil {
		return formatNum(v)
	}
	return h.get(i, u)
}
