package alertmanager

import (
	_ "embed"
	"fmt"
	"net/url"
	"strings"

	"github.com/prometheus/alertmanager/template"
)

// gpuscopeTemplates are gpuscope's default notification templates
// (gpuscope.tmpl says what they change).
//
//go:embed gpuscope.tmpl
var gpuscopeTemplates string

// templates makes the templates a config's receivers render with:
// Alertmanager's defaults (default.tmpl and email.tmpl, which every
// receiver's default fields name), gpuscope's over them, then the files
// the config's globs match, so that a user's template can redefine any of
// them, as in Alertmanager. externalURL is their .ExternalURL.
func templates(globs []string, externalURL *url.URL) (*template.Template, error) {
	t, err := template.FromGlobs(nil)
	if err != nil {
		return nil, fmt.Errorf("Alertmanager's default templates: %w", err)
	}
	if err := t.Parse(strings.NewReader(gpuscopeTemplates)); err != nil {
		return nil, fmt.Errorf("gpuscope's default templates: %w", err)
	}
	for _, g := range globs {
		if err := t.FromGlob(g); err != nil {
			return nil, err
		}
	}
	t.ExternalURL = externalURL
	return t, nil
}

// templateURL is u as Alertmanager keeps its external URL for the
// templates: without a trailing slash, which they add (app/app.go
// extURL).
func templateURL(u *url.URL) *url.URL {
	c := *u
	c.Path = strings.TrimRight(c.Path, "/")
	c.RawPath = ""
	return &c
}
