package apptest

import (
	"encoding/json"
	"net/url"
	"strconv"
	"time"

	"github.com/stretchr/testify/require"
)

// ReportRun is the part of /api/v1/workloads' rows (accounting.Run) these
// tests read.
type ReportRun struct {
	Workload        string     `json:"workload"`
	Runtime         string     `json:"runtime"`
	Image           string     `json:"image"`
	Instance        string     `json:"instance"`
	ID              string     `json:"id"`
	Start           time.Time  `json:"start"`
	End             *time.Time `json:"end"`
	Running         bool       `json:"running"`
	DurationSeconds float64    `json:"duration_seconds"`
	GPUs            []string   `json:"gpus"`
	GPUHours        float64    `json:"gpu_hours"`
	EnergyKWh       *float64   `json:"energy_kwh"`
	CPUCoreSeconds  float64    `json:"cpu_core_seconds"`
	XIDErrors       int        `json:"xid_errors"`
	Alerts          []string   `json:"alerts"`
}

// Report asks /api/v1/workloads for the runs between start and end.
func (c Client) Report(start, end time.Time) []ReportRun {
	c.T.Helper()
	q := url.Values{}
	q.Set("start", strconv.FormatInt(start.Unix(), 10))
	q.Set("end", strconv.FormatInt(end.Unix(), 10))
	code, body := c.Get("/api/v1/workloads?" + q.Encode())
	require.Equal(c.T, 200, code, body)
	var env struct {
		Status string      `json:"status"`
		Data   []ReportRun `json:"data"`
	}
	require.NoError(c.T, json.Unmarshal([]byte(body), &env), body)
	require.Equal(c.T, "success", env.Status, body)
	return env.Data
}
