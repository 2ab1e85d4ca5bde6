package dashboards

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"time"

	"github.com/prometheus/common/model"
	"go.yaml.in/yaml/v3"
)

// ProvisionOptions describe the Grafana that will read the files.
type ProvisionOptions struct {
	// URL is gpuscope's address as Grafana reaches it.
	URL string
	// ScrapeInterval becomes the data source's timeInterval, the lower
	// bound of $__interval and $__rate_interval's base.
	ScrapeInterval time.Duration
	// GrafanaPath is where Dir/provisioning is mounted in Grafana's
	// container (its [paths] provisioning, /etc/grafana/provisioning).
	GrafanaPath string
}

// Export writes every dashboard as <uid>.json into dir, ready for Grafana's
// Dashboards → Import.
func Export(s *Set, dir string) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("create %s: %w", dir, err)
	}
	var files []string
	for _, d := range s.List() {
		j, _ := s.JSON(d.UID)
		p := filepath.Join(dir, d.UID+".json")
		if err := os.WriteFile(p, j, 0o644); err != nil {
			return nil, fmt.Errorf("write dashboard %s: %w", p, err)
		}
		files = append(files, p)
	}
	return files, nil
}

// Provision writes a Grafana provisioning tree under dir:
//
//	dir/provisioning/datasources/gpuscope.yaml   the data source
//	dir/provisioning/dashboards/gpuscope.yaml    the dashboard provider
//	dir/provisioning/dashboards/gpuscope/*.json  the dashboards
//
// Mount dir/provisioning at Grafana's /etc/grafana/provisioning.
func Provision(s *Set, dir string, o ProvisionOptions) ([]string, error) {
	if o.URL == "" {
		return nil, fmt.Errorf("the URL Grafana reaches gpuscope at is required (--url)")
	}
	// Grafana stores the data source's url as given and fails on every
	// query of one without a scheme, long after this command said nothing.
	if u, err := url.Parse(o.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("--url %q is not an http:// or https:// address (e.g. http://gpuscope-host:9089)", o.URL)
	}
	if o.ScrapeInterval <= 0 {
		return nil, fmt.Errorf("scrape interval must be positive, got %s", o.ScrapeInterval)
	}
	if o.GrafanaPath == "" {
		o.GrafanaPath = "/etc/grafana/provisioning"
	}
	root := filepath.Join(dir, "provisioning")
	files, err := Export(s, filepath.Join(root, "dashboards", "gpuscope"))
	if err != nil {
		return nil, err
	}
	ds := filepath.Join(root, "datasources", "gpuscope.yaml")
	if err := writeYAML(ds, datasourceFile(o)); err != nil {
		return nil, err
	}
	provider := filepath.Join(root, "dashboards", "gpuscope.yaml")
	if err := writeYAML(provider, providerFile(o)); err != nil {
		return nil, err
	}
	return append([]string{ds, provider}, files...), nil
}

// DatasourceFile is the schema of provisioning/datasources/*.yaml
// (Grafana's docs: administration/provisioning).
type DatasourceFile struct {
	APIVersion  int          `yaml:"apiVersion"`
	Datasources []Datasource `yaml:"datasources"`
}

// Datasource is one provisioned data source.
type Datasource struct {
	Name      string         `yaml:"name"`
	Type      string         `yaml:"type"`
	UID       string         `yaml:"uid"`
	Access    string         `yaml:"access"`
	URL       string         `yaml:"url"`
	IsDefault bool           `yaml:"isDefault"`
	Editable  bool           `yaml:"editable"`
	JSONData  map[string]any `yaml:"jsonData"`
}

func datasourceFile(o ProvisionOptions) DatasourceFile {
	return DatasourceFile{
		APIVersion: 1,
		Datasources: []Datasource{{
			Name:      "gpuscope",
			Type:      "prometheus",
			UID:       DatasourceUID,
			Access:    "proxy",
			URL:       strings.TrimSuffix(o.URL, "/"),
			IsDefault: true,
			Editable:  false,
			JSONData: map[string]any{
				// POST carries long dashboard queries; gpuscope reads
				// parameters from both the URL and the form body.
				"httpMethod":     "POST",
				"prometheusType": "Prometheus",
				// The Prometheus release gpuscope embeds: Grafana picks
				// the API features it uses from it (semver required).
				"prometheusVersion": PrometheusVersion(),
				"timeInterval":      model.Duration(o.ScrapeInterval).String(),
				// Rules and alerts come from gpuscope's own rule engine;
				// Grafana lists them read-only.
				"manageAlerts": true,
				"cacheLevel":   "Low",
			},
		}},
	}
}

// ProviderFile is the schema of provisioning/dashboards/*.yaml.
type ProviderFile struct {
	APIVersion int        `yaml:"apiVersion"`
	Providers  []Provider `yaml:"providers"`
}

// Provider is one dashboard provider.
type Provider struct {
	Name                  string            `yaml:"name"`
	OrgID                 int               `yaml:"orgId"`
	Folder                string            `yaml:"folder"`
	Type                  string            `yaml:"type"`
	DisableDeletion       bool              `yaml:"disableDeletion"`
	UpdateIntervalSeconds int               `yaml:"updateIntervalSeconds"`
	AllowUIUpdates        bool              `yaml:"allowUiUpdates"`
	Options               map[string]string `yaml:"options"`
}

func providerFile(o ProvisionOptions) ProviderFile {
	return ProviderFile{
		APIVersion: 1,
		Providers: []Provider{{
			Name:                  "gpuscope",
			OrgID:                 1,
			Folder:                "gpuscope",
			Type:                  "file",
			DisableDeletion:       true,
			UpdateIntervalSeconds: 60,
			AllowUIUpdates:        false,
			Options:               map[string]string{"path": filepath.ToSlash(filepath.Join(o.GrafanaPath, "dashboards", "gpuscope"))},
		}},
	}
}

func writeYAML(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		return fmt.Errorf("render %s: %w", path, err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// PrometheusVersion is the semver of the Prometheus release whose code
// gpuscope embeds, read from the binary's module list: Prometheus 3.x.y is
// published as Go module version v0.3xx.y (v0.316.0 is 3.16.0).
func PrometheusVersion() string {
	const fallback = "3.0.0"
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return fallback
	}
	for _, m := range bi.Deps {
		if m.Path != "github.com/prometheus/prometheus" {
			continue
		}
		var minor, patch int
		if _, err := fmt.Sscanf(m.Version, "v0.%d.%d", &minor, &patch); err != nil || minor < 300 {
			return fallback
		}
		return fmt.Sprintf("%d.%d.%d", minor/100, minor%100, patch)
	}
	return fallback
}

// IsLoopbackURL reports whether u names this host's loopback (localhost,
// 127.0.0.0/8, ::1): from inside Grafana's container that is Grafana
// itself, so a data source written with it answers nothing there.
func IsLoopbackURL(u string) bool {
	p, err := url.Parse(u)
	if err != nil {
		return false
	}
	h := p.Hostname()
	if h == "localhost" || strings.HasSuffix(h, ".localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
