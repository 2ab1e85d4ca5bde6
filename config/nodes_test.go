package config

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/scrape"
)

func TestLoadNodes(t *testing.T) {
	for _, tc := range []struct {
		name  string
		input string
		check func(t *testing.T, n scrape.Nodes)
	}{
		{
			name:  "no nodes section: nothing configured, defaults kept",
			input: "",
			check: func(t *testing.T, n scrape.Nodes) {
				require.False(t, n.Configured())
				require.Equal(t, "http", n.Scheme)
				require.True(t, n.HTTPClientConfig.FollowRedirects)
			},
		},
		{
			name:  "nodes: with no value",
			input: "nodes:\n",
			check: func(t *testing.T, n scrape.Nodes) {
				require.False(t, n.Configured())
				require.Equal(t, "http", n.Scheme)
			},
		},
		{
			name: "short and long forms, files, basic auth and TLS inline",
			input: `nodes:
  static:
    - gpu-01:9089
    - address: 10.0.0.2:9100
      name: gpu-02
      labels: {rack: b}
    - "[fd00::3]:9089"
  files: [nodes/*.yml]
  refresh_interval: 30s
  scheme: https
  basic_auth:
    username: scraper
    password: secret
  tls_config:
    insecure_skip_verify: true
`,
			check: func(t *testing.T, n scrape.Nodes) {
				require.True(t, n.Configured())
				require.Len(t, n.Static, 3)
				require.Equal(t, "gpu-01:9089", n.Static[0].Address)
				require.Equal(t, "gpu-01", n.Static[0].Name, "name defaults to the host part")
				require.Equal(t, "gpu-02", n.Static[1].Name)
				require.Equal(t, model.LabelSet{"rack": "b"}, n.Static[1].Labels)
				require.Equal(t, "fd00::3", n.Static[2].Name)
				require.Equal(t, []string{"nodes/*.yml"}, n.Files)
				require.Equal(t, model.Duration(30*time.Second), n.RefreshInterval)
				require.Equal(t, "https", n.Scheme)
				require.Equal(t, "scraper", n.HTTPClientConfig.BasicAuth.Username)
				require.Equal(t, "secret", string(n.HTTPClientConfig.BasicAuth.Password))
				require.True(t, n.HTTPClientConfig.TLSConfig.InsecureSkipVerify)
				require.True(t, n.HTTPClientConfig.EnableHTTP2, "Prometheus's HTTP client defaults stay")
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load([]byte(tc.input), "test.yml", nil)
			require.NoError(t, err)
			tc.check(t, c.Nodes)
		})
	}
}

func TestLoadNodesErrors(t *testing.T) {
	for _, tc := range []struct {
		name  string
		input string
		want  []string
	}{
		{
			name:  "no port",
			input: "global:\n  scrape_interval: 5s\nnodes:\n  static:\n    - gpu-01:9089\n    - gpu-02\n",
			want:  []string{"test.yml:6:", `"gpu-02" has no port`, "gpu-02:9089"},
		},
		{
			name:  "no port, long form",
			input: "nodes:\n  static:\n    - address: gpu-02\n      name: b\n",
			want:  []string{"test.yml:3:", "has no port"},
		},
		{
			name:  "port not a number",
			input: "nodes:\n  static: [gpu-01:http]\n",
			want:  []string{"test.yml:2:", "not a number"},
		},
		{
			name:  "unknown key in a node",
			input: "nodes:\n  static:\n    - address: a:1\n      lables: {x: y}\n",
			want:  []string{"test.yml:4:", "lables"},
		},
		{
			name:  "unknown key in the section",
			input: "nodes:\n  statics: [a:1]\n",
			want:  []string{"test.yml:2:", "statics"},
		},
		{
			name:  "two nodes with one name",
			input: "nodes:\n  static:\n    - a:1\n    - {address: b:1, name: a}\n",
			want:  []string{"test.yml:4:", `name "a" is already used on line 3`},
		},
		{
			name:  "instance in labels",
			input: "nodes:\n  static:\n    - {address: a:1, labels: {instance: x}}\n",
			want:  []string{"test.yml:3:", `"instance" is set by gpuscope`},
		},
		{
			name:  "file_sd file name",
			input: "nodes:\n  files: [nodes.txt]\n",
			want:  []string{`"nodes.txt" is not valid for file discovery`},
		},
		{
			name:  "bad scheme",
			input: "nodes:\n  scheme: ftp\n",
			want:  []string{`scheme "ftp"`},
		},
		{
			name:  "inconsistent HTTP client config",
			input: "nodes:\n  static: [a:1]\n  basic_auth: {username: u, password: p}\n  authorization: {credentials: t}\n",
			want:  []string{"nodes:", "at most one of basic_auth, oauth2 & authorization"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Load([]byte(tc.input), "test.yml", nil)
			require.Error(t, err)
			for _, w := range tc.want {
				require.ErrorContains(t, err, w)
			}
		})
	}
}

// TestLoadFileNodesPaths: relative file_sd and TLS paths are resolved
// against the config file's folder, as Prometheus resolves its own.
func TestLoadFileNodesPaths(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "gpuscope.yml")
	require.NoError(t, os.WriteFile(p, []byte("nodes:\n  files: [nodes/*.json]\n  tls_config: {ca_file: ca.pem}\n"), 0o644))
	c, err := LoadFile(p, nil)
	require.NoError(t, err)
	require.Equal(t, []string{filepath.Join(dir, "nodes/*.json")}, c.Nodes.Files)
	require.Equal(t, filepath.Join(dir, "ca.pem"), c.Nodes.HTTPClientConfig.TLSConfig.CAFile)
}
