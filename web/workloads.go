package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/gpuscope/gpuscope/accounting"
)

// WorkloadReporter computes the run report served at /api/v1/workloads.
type WorkloadReporter interface {
	Report(ctx context.Context, q accounting.Query) (accounting.Report, error)
}

// envelope is the Prometheus HTTP API's envelope, so that clients of
// /api/v1/query read /api/v1/workloads the same way.
type envelope struct {
	Status    string   `json:"status"`
	Data      any      `json:"data,omitempty"`
	ErrorType string   `json:"errorType,omitempty"`
	Error     string   `json:"error,omitempty"`
	Warnings  []string `json:"warnings,omitempty"`
}

// workloads serves the run report: GET or POST with the query API's
// start and end (RFC 3339 or Unix seconds; default the last 7 days up to
// now) and all=true for every cgroup.
func workloads(r WorkloadReporter) echo.HandlerFunc {
	return func(c echo.Context) error {
		end, err := parseTimeParam(c, "end", time.Now())
		if err != nil {
			return badData(c, err)
		}
		start, err := parseTimeParam(c, "start", end.Add(-7*24*time.Hour))
		if err != nil {
			return badData(c, err)
		}
		all := false
		if v := c.FormValue("all"); v != "" {
			if all, err = strconv.ParseBool(v); err != nil {
				return badData(c, fmt.Errorf("invalid parameter \"all\": %q is not true or false", v))
			}
		}
		rep, err := r.Report(c.Request().Context(), accounting.Query{Start: start, End: end, All: all})
		switch {
		case err == nil:
		case errors.Is(err, accounting.ErrEmptyRange):
			return badData(c, err)
		case errors.Is(err, context.DeadlineExceeded):
			return c.JSON(http.StatusServiceUnavailable, envelope{Status: "error", ErrorType: "timeout", Error: err.Error()})
		case errors.Is(err, context.Canceled):
			return c.JSON(499, envelope{Status: "error", ErrorType: "canceled", Error: err.Error()}) // as Prometheus: the client went away
		default:
			return c.JSON(http.StatusUnprocessableEntity, envelope{Status: "error", ErrorType: "execution", Error: err.Error()})
		}
		return c.JSONBlob(http.StatusOK, mustJSON(envelope{Status: "success", Data: rep.Runs, Warnings: rep.Warnings}))
	}
}

func badData(c echo.Context, err error) error {
	return c.JSON(http.StatusBadRequest, envelope{Status: "error", ErrorType: "bad_data", Error: err.Error()})
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("encode the workload report: %v", err)) // only NaN or Inf could do it; the report has none
	}
	return b
}

// parseTimeParam reads a time as the Prometheus API does: Unix seconds
// with a fraction, or RFC 3339.
func parseTimeParam(c echo.Context, name string, def time.Time) (time.Time, error) {
	v := c.FormValue(name)
	if v == "" {
		return def, nil
	}
	if f, err := strconv.ParseFloat(v, 64); err == nil && !math.IsNaN(f) && !math.IsInf(f, 0) {
		sec, frac := math.Modf(f)
		return time.Unix(int64(sec), int64(math.Round(frac*1e9))).UTC(), nil
	}
	if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
		return t, nil
	}
	return time.Time{}, fmt.Errorf("invalid parameter %q: cannot parse %q to a valid timestamp (Unix seconds or RFC 3339)", name, v)
}
