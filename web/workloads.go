package web

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"
	apiv1 "github.com/prometheus/prometheus/web/api/v1"

	"github.com/gpuscope/gpuscope/accounting"
	"github.com/gpuscope/gpuscope/digest"
)

// WorkloadReporter computes the run report served at /api/v1/workloads.
type WorkloadReporter interface {
	Report(ctx context.Context, q accounting.Query) (accounting.Report, error)
}

// workloads serves the run report: GET or POST with the query API's
// start and end (RFC 3339 or Unix seconds; default the last 7 days up to
// now), or since (a duration back from now) or month (YYYY-MM in UTC) as
// `gpuscope workloads` takes them, and all=true for every cgroup. With by (user, compose_project,
// workload, label:<name>, ...; repeated or comma-separated) the data is
// the runs' sums by those values instead of the runs.
func workloads(r WorkloadReporter) echo.HandlerFunc {
	return func(c echo.Context) error {
		start, end, err := reportPeriod(c)
		if err != nil {
			return badData(c, err)
		}
		all := false
		if v := c.FormValue("all"); v != "" {
			if all, err = strconv.ParseBool(v); err != nil {
				return badData(c, fmt.Errorf("invalid parameter \"all\": %q is not true or false", v))
			}
		}
		var byValues []string
		if params, err := c.FormParams(); err == nil {
			byValues = params["by"]
		}
		by, extra, err := accounting.ParseGroupBy(byValues)
		if err != nil {
			return badData(c, fmt.Errorf("invalid parameter \"by\": %w", err))
		}
		rep, err := r.Report(c.Request().Context(), accounting.Query{Start: start, End: end, All: all, Labels: extra})
		switch {
		case err == nil:
		case errors.Is(err, accounting.ErrEmptyRange):
			return badData(c, err)
		case errors.Is(err, context.DeadlineExceeded):
			return c.JSON(http.StatusServiceUnavailable, apiv1.Response{Status: "error", ErrorType: "timeout", Error: err.Error()})
		case errors.Is(err, context.Canceled):
			return c.JSON(499, apiv1.Response{Status: "error", ErrorType: "canceled", Error: err.Error()}) // as Prometheus: the client went away
		default:
			return c.JSON(http.StatusUnprocessableEntity, apiv1.Response{Status: "error", ErrorType: "execution", Error: err.Error()})
		}
		if len(by) > 0 {
			groups := accounting.GroupRuns(rep.Runs, by)
			if groups == nil {
				groups = []accounting.Group{}
			}
			return c.JSON(http.StatusOK, apiv1.Response{Status: "success", Data: groups, Warnings: rep.Warnings})
		}
		return c.JSON(http.StatusOK, apiv1.Response{Status: "success", Data: rep.Runs, Warnings: rep.Warnings})
	}
}

// reportPeriod is the report's range: start and end, or since or month.
func reportPeriod(c echo.Context) (start, end time.Time, err error) {
	since, month := c.FormValue("since"), c.FormValue("month")
	if since != "" || month != "" {
		if c.FormValue("start") != "" || c.FormValue("end") != "" {
			return start, end, errors.New("give start and end, or since or month, not both")
		}
		start, end, err = accounting.Period(since, month, time.Now())
		if err != nil {
			return start, end, fmt.Errorf("invalid parameters: %w", err)
		}
		return start, end, nil
	}
	if end, err = parseTimeParam(c, "end", time.Now()); err != nil {
		return start, end, err
	}
	start, err = parseTimeParam(c, "start", end.Add(-accounting.DefaultSince))
	return start, end, err
}

func badData(c echo.Context, err error) error {
	return c.JSON(http.StatusBadRequest, apiv1.Response{Status: "error", ErrorType: "bad_data", Error: err.Error()})
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

// DigestSender sends the usage digests of the period ending at end (zero:
// now); *digest.Digest is one.
type DigestSender interface {
	Send(ctx context.Context, end time.Time) (digest.Sent, error)
}

// sendDigests serves POST /api/v1/digests/send: the usage digests now,
// or for the period ending at end (RFC 3339 or Unix seconds), whatever
// the schedule says, to check the routes or resend a week's.
func sendDigests(d DigestSender) echo.HandlerFunc {
	return func(c echo.Context) error {
		end, err := parseTimeParam(c, "end", time.Time{})
		if err != nil {
			return badData(c, err)
		}
		sent, err := d.Send(c.Request().Context(), end)
		if err != nil {
			return c.JSON(http.StatusUnprocessableEntity, apiv1.Response{Status: "error", ErrorType: "execution", Error: err.Error()})
		}
		return c.JSON(http.StatusOK, apiv1.Response{Status: "success", Data: sent})
	}
}
