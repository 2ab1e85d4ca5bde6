package web

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"strings"

	"github.com/labstack/echo/v4"
	toolkitweb "github.com/prometheus/exporter-toolkit/web"
	"go.yaml.in/yaml/v2"
)

// Authentication is exporter-toolkit's: --web.config.file sets TLS and
// basic_auth_users, and the toolkit checks every request on the public
// listener before it reaches echo (the self listener the built-in scrape
// jobs use is in memory and serves only /metrics*). What gpuscope adds is
// a rule for the endpoints that change state or stop the process — the
// admin API (delete series, snapshot, clean tombstones) and the lifecycle
// endpoints (/-/reload, /-/quit): when enabled they require the web
// config to authenticate every request, checked at start (serve refuses
// to start) and again at every request to them (403), since the toolkit
// re-reads the file at every request and it may have lost its users since.
// AllowUnauthenticatedAdmin lifts the rule, for a listener that only
// trusted clients can reach.

// Auth is what a web config file asks of clients.
type Auth struct {
	// TLS: the listener serves HTTPS.
	TLS bool
	// BasicAuth: basic_auth_users is not empty.
	BasicAuth bool
	// ClientCert: tls_server_config.client_auth_type is
	// RequireAndVerifyClientCert.
	ClientCert bool
}

// Authenticated says whether every request must prove who sent it.
func (a Auth) Authenticated() bool { return a.BasicAuth || a.ClientCert }

// ReadWebConfig validates an exporter-toolkit web config file as the
// toolkit will serve it (YAML, bcrypt hashes, certificates and keys) and
// reports what it asks of clients. An empty path is plain HTTP without
// authentication.
func ReadWebConfig(path string) (Auth, error) {
	if path == "" {
		return Auth{}, nil
	}
	if err := toolkitweb.Validate(path); err != nil {
		return Auth{}, fmt.Errorf("web config file %s: %w", path, err)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return Auth{}, fmt.Errorf("web config file: %w", err)
	}
	var c toolkitweb.Config
	if err := yaml.UnmarshalStrict(data, &c); err != nil {
		return Auth{}, fmt.Errorf("web config file %s: %w", path, err)
	}
	return Auth{
		TLS:        c.TLSConfig.IsEnabled(),
		BasicAuth:  len(c.Users) > 0,
		ClientCert: c.TLSConfig.ClientAuth == "RequireAndVerifyClientCert",
	}, nil
}

// ErrUnauthenticatedAdmin is returned by CheckAuth when a privileged
// endpoint is enabled without authentication.
var ErrUnauthenticatedAdmin = errors.New("admin and lifecycle endpoints need authentication")

// CheckAuth validates the web config file and refuses privileged
// endpoints (named by the flags that enable them) when the file does not
// authenticate every request, unless allowUnauthenticated. It is called
// at start, so that serve fails at once naming the fix.
func CheckAuth(webConfigFile string, privileged []string, allowUnauthenticated bool) (Auth, error) {
	auth, err := ReadWebConfig(webConfigFile)
	if err != nil {
		return auth, err
	}
	if len(privileged) == 0 || auth.Authenticated() || allowUnauthenticated {
		return auth, nil
	}
	where := "no --web.config.file is given"
	if webConfigFile != "" {
		where = webConfigFile + " sets no basic_auth_users and no client_auth_type: RequireAndVerifyClientCert"
	}
	return auth, fmt.Errorf("%w: %s enabled but %s; add basic_auth_users (bcrypt hashes) to the web config file, or pass --web.allow-unauthenticated-admin if only trusted clients can reach the listen address",
		ErrUnauthenticatedAdmin, strings.Join(privileged, " and "), where)
}

// privileged gates an admin or lifecycle handler: it answers 403 unless
// the web config (re-read now, as the toolkit does at every request)
// authenticates every request or unauthenticated use was allowed. With
// authentication on, the toolkit has already checked the credentials of
// any request that reaches here.
func (h *Handler) privileged(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if !h.opts.AllowUnauthenticatedAdmin {
			auth, err := ReadWebConfig(h.opts.WebConfigFile)
			if err != nil {
				h.opts.Logger.Error("Refusing a privileged request: cannot read the web config", "path", c.Request().URL.Path, "err", err)
				return c.String(http.StatusInternalServerError, "cannot read the web config file\n")
			}
			if !auth.Authenticated() {
				h.opts.Logger.Warn("Refusing a privileged request: the web config no longer requires authentication", "path", c.Request().URL.Path)
				return c.String(http.StatusForbidden, "this endpoint requires authentication (basic_auth_users in --web.config.file)\n")
			}
		}
		return next(c)
	}
}
