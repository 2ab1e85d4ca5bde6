package web

import (
	"context"
	"errors"
	"fmt"
	"net/http"

	"github.com/labstack/echo/v4"
	apiv1 "github.com/prometheus/prometheus/web/api/v1"

	"github.com/gpuscope/gpuscope/gpu"
)

// GPUProcessSource lists the GPU processes of a node's last sampling cycle
// (gpu.Collector.Processes), for /api/v1/gpu/processes: this node's own,
// and on an appliance an agent's, asked at the agent's own endpoint.
type GPUProcessSource interface {
	// GPUProcesses returns node's processes ("" is this node), of GPU gpu
	// only (an index or UUID) when it is not empty. An error wrapping
	// ErrNotFound means there is no such node or GPU.
	GPUProcesses(ctx context.Context, node, gpu string) (gpu.ProcessList, error)
}

// ErrNotFound is a GPUProcessSource's answer for a node it does not know,
// or a GPU the node does not have.
var ErrNotFound = errors.New("not found")

// gpuProcesses serves GET /api/v1/gpu/processes?node=&gpu=: the GPU
// processes of a node as gpu.ProcessList, in the query API's envelope
// ({"status":"success","data":{...}}). 404 (not_found) names an unknown
// node or GPU; 503 (unavailable) an agent that could not be asked.
// Nothing is stored: the processes are the collector's last cycle's.
func gpuProcesses(src GPUProcessSource) echo.HandlerFunc {
	return func(c echo.Context) error {
		node, gpuSel := c.QueryParam("node"), c.QueryParam("gpu")
		l, err := src.GPUProcesses(c.Request().Context(), node, gpuSel)
		if err == nil && gpuSel != "" && len(l.GPUs) == 0 {
			err = fmt.Errorf("%w: node %q has no GPU %q (a GPU index or UUID)", ErrNotFound, l.Node, gpuSel)
		}
		switch {
		case err == nil:
			return c.JSON(http.StatusOK, apiv1.Response{Status: "success", Data: l})
		case errors.Is(err, ErrNotFound):
			return c.JSON(http.StatusNotFound, apiv1.Response{Status: "error", ErrorType: "not_found", Error: err.Error()})
		case errors.Is(err, context.Canceled):
			return c.JSON(499, apiv1.Response{Status: "error", ErrorType: "canceled", Error: err.Error()})
		}
		return c.JSON(http.StatusServiceUnavailable, apiv1.Response{Status: "error", ErrorType: "unavailable", Error: err.Error()})
	}
}
