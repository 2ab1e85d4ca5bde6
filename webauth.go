package main

import (
	"log/slog"
	"strings"

	"github.com/gpuscope/gpuscope/web"
)

// checkAuth validates --web.config.file before anything starts, and
// refuses to serve the admin API or the lifecycle endpoints when that file
// does not authenticate every request, unless
// --web.allow-unauthenticated-admin says the listener is trusted.
func checkAuth(f *serveFlags, listenAddress string, logger *slog.Logger) error {
	var privileged []string
	if f.enableAdmin {
		privileged = append(privileged, "--web.enable-admin-api")
	}
	if f.enableLifecycle {
		privileged = append(privileged, "--web.enable-lifecycle")
	}
	auth, err := web.CheckAuth(f.webConfigFile, privileged, f.allowUnauthAdmin)
	if err != nil {
		return err
	}
	if len(privileged) > 0 && !auth.Authenticated() {
		logger.Warn("Admin and lifecycle endpoints are served without authentication (--web.allow-unauthenticated-admin)",
			"enabled", strings.Join(privileged, " "), "listen", listenAddress)
	}
	return nil
}
