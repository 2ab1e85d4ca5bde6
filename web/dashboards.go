package web

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/gpuscope/gpuscope/dashboards"
)

// MountDashboards serves the built-in dashboards: GET /api/dashboards lists
// uid and title, GET /api/dashboards/{uid} returns the JSON that Grafana's
// Dashboards → Import accepts.
func (h *Handler) MountDashboards(set *dashboards.Set) {
	h.dashboards = set
	h.echo.GET("/api/dashboards", func(c echo.Context) error {
		return c.JSON(http.StatusOK, set.List())
	})
	h.echo.GET("/api/dashboards/:uid", func(c echo.Context) error {
		j, ok := set.JSON(c.Param("uid"))
		if !ok {
			return c.JSON(http.StatusNotFound, map[string]string{"error": "no dashboard with uid " + c.Param("uid")})
		}
		return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, j)
	})
}
