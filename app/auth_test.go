package app_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/docker/go-units"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/gpuscope/gpuscope/app"
	"github.com/gpuscope/gpuscope/app/apptest"
)

const (
	authUser     = "admin"
	authPassword = "s3cret-e2e"
)

// TestAuth: an agent and an appliance serve HTTPS with basic auth from one
// --web.config.file. Requests without the password, with a wrong one, in
// plain HTTP or from a client that does not trust the CA get nothing; the
// built-in self-scrapes and the appliance's scrapes of the agent (nodes:
// with scheme https, basic_auth and the CA) keep working, and scrapes with
// a wrong password or without the CA fail with the reason. The admin API
// and the lifecycle endpoints answer only when enabled and only with the
// password; serve refuses to enable them without authentication. CORS
// follows --web.cors.origin and request bodies over
// --web.max-request-body-size get 413.
func TestAuth(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	caFile, certFile, keyFile := writeTLSFiles(t, dir)
	hash, err := bcrypt.GenerateFromPassword([]byte(authPassword), bcrypt.MinCost)
	require.NoError(t, err)
	tlsOnly := filepath.Join(dir, "web-tls-only.yml")
	require.NoError(t, os.WriteFile(tlsOnly, []byte(fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\n", certFile, keyFile)), 0o600))
	webConfig := filepath.Join(dir, "web.yml")
	require.NoError(t, os.WriteFile(webConfig, []byte(fmt.Sprintf("tls_server_config:\n  cert_file: %s\n  key_file: %s\nbasic_auth_users:\n  %s: %s\n",
		certFile, keyFile, authUser, hash)), 0o600))
	c := newHTTPSClient(t, caFile)

	// serve will not enable the admin API behind TLS alone.
	_, err = apptest.Start(t, "", with(func(s *app.Settings) { s.WebConfigFile, s.EnableAdmin = tlsOnly, true }))
	require.ErrorContains(t, err, "admin and lifecycle endpoints need authentication", "serve with the admin API and no authentication")
	require.ErrorContains(t, err, "--web.allow-unauthenticated-admin")

	a := apptest.ServeAgent(t, "node-a", writeConfig(t, t.TempDir(), agentConfig), func(s *app.AgentSettings) {
		s.GPUBackend, s.WebConfigFile = "sim", webConfig
	})
	agent := &process{Client: apptest.Client{T: t, URL: "https://" + a.Addr().String()}, agent: a, t: t, out: a.Log}
	agentPort := a.Addr().(*net.TCPAddr).Port

	cfg := writeConfig(t, dir, fmt.Sprintf(`
global:
  scrape_interval: 1s
nodes:
  static:
    - {address: "127.0.0.1:%[1]d", name: node-a}
  scheme: https
  basic_auth: {username: %[2]s, password: %[3]s}
  tls_config: {ca_file: %[4]s}
scrape_configs:
  - job_name: agent-wrong-password
    scheme: https
    basic_auth: {username: %[2]s, password: wrong}
    tls_config: {ca_file: %[4]s}
    static_configs: [{targets: ["127.0.0.1:%[1]d"]}]
  - job_name: agent-unknown-ca
    scheme: https
    basic_auth: {username: %[2]s, password: %[3]s}
    static_configs: [{targets: ["127.0.0.1:%[1]d"]}]
`, agentPort, authUser, authPassword, caFile))
	p := c.serve(t, configFile(cfg), with(func(s *app.Settings) {
		s.GPUBackend, s.WebConfigFile, s.EnableAdmin, s.EnableLifecycle = "sim", webConfig, true, true
		s.CORSOrigin, s.MaxRequestBodyBytes = `https://grafana\.example\.com`, 4*units.KiB
	}))

	t.Run("credentials", func(t *testing.T) {
		for _, tc := range []struct {
			name, url string
		}{
			{"serve API", p.URL + "/api/v1/query?query=up"},
			{"serve health", p.URL + "/-/healthy"},
			{"serve metrics", p.URL + "/metrics"},
			{"agent GPUs", agent.URL + "/metrics/gpu"},
			{"agent cAdvisor", agent.URL + "/metrics/cadvisor"},
		} {
			t.Run(tc.name, func(t *testing.T) {
				code, body, _ := c.do(t, http.MethodGet, tc.url, "", "", nil, nil)
				require.Equal(t, 401, code, "no credentials: %s", body)
				code, body, _ = c.do(t, http.MethodGet, tc.url, authUser, "wrong", nil, nil)
				require.Equal(t, 401, code, "wrong password: %s", body)
				code, body, _ = c.do(t, http.MethodGet, tc.url, "nobody", authPassword, nil, nil)
				require.Equal(t, 401, code, "unknown user: %s", body)
				code, body, _ = c.do(t, http.MethodGet, tc.url, authUser, authPassword, nil, nil)
				require.Equal(t, 200, code, body)
			})
		}
	})

	t.Run("TLS", func(t *testing.T) {
		for _, base := range []string{p.URL, agent.URL} {
			// Plain HTTP to the TLS port: Go's TLS server answers the
			// HTTP request with 400 and serves nothing.
			resp, err := http.Get(strings.Replace(base, "https://", "http://", 1) + "/metrics")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				require.Equal(t, 400, resp.StatusCode, string(b))
				require.Contains(t, string(b), "HTTP request to an HTTPS server")
			}
			// A client that does not trust the CA refuses the server.
			req, err := http.NewRequest(http.MethodGet, base+"/metrics", nil)
			require.NoError(t, err)
			req.SetBasicAuth(authUser, authPassword)
			_, err = (&http.Client{Timeout: 10 * time.Second}).Do(req)
			require.ErrorContains(t, err, "certificate signed by unknown authority")
		}
	})

	t.Run("scrapes", func(t *testing.T) {
		want := map[string]float64{
			"gpuscope": 1, "cadvisor": 1, "gpu": 1,
			"node-agent": 1, "node-cadvisor": 1, "node-gpu": 1,
			"agent-wrong-password": 0, "agent-unknown-ca": 0,
		}
		eventually(t, 60*time.Second, "every job scraped", func() error {
			up, err := c.vectorByLabel(p, `up`, "job")
			if err != nil {
				return err
			}
			for job, v := range want {
				if got, ok := up[job]; !ok || got != v {
					return fmt.Errorf("up{job=%q} = %v (present %v), want %v; all: %v", job, got, ok, v, up)
				}
			}
			return nil
		})
		// The last sample of the past minute, not the newest scrape's: one
		// that missed its timeout on a busy machine marks its series stale.
		gpus, err := c.vectorByLabel(p, `count by (instance) (last_over_time(DCGM_FI_DEV_GPU_UTIL[1m]))`, "instance")
		require.NoError(t, err)
		require.Equal(t, map[string]float64{"e2e-node": 8, "node-a": 2}, gpus, "GPU series by node")

		code, body, _ := c.do(t, http.MethodGet, p.URL+"/api/v1/targets?state=active", authUser, authPassword, nil, nil)
		require.Equal(t, 200, code, body)
		var targets struct {
			Data struct {
				ActiveTargets []struct {
					Labels    map[string]string
					Health    string
					LastError string
				}
			}
		}
		require.NoError(t, json.Unmarshal([]byte(body), &targets))
		reasons := map[string]string{}
		for _, tg := range targets.Data.ActiveTargets {
			reasons[tg.Labels["job"]] = tg.LastError
		}
		require.Contains(t, reasons["agent-wrong-password"], "401 Unauthorized")
		require.Contains(t, reasons["agent-unknown-ca"], "certificate signed by unknown authority")
		require.Empty(t, reasons["node-gpu"])
	})

	t.Run("admin and lifecycle enabled", func(t *testing.T) {
		for _, path := range []string{"/api/v1/admin/tsdb/snapshot", "/-/reload", "/-/quit"} {
			code, body, _ := c.do(t, http.MethodPost, p.URL+path, "", "", nil, nil)
			require.Equal(t, 401, code, "%s without credentials: %s", path, body)
			code, body, _ = c.do(t, http.MethodPost, p.URL+path, authUser, "wrong", nil, nil)
			require.Equal(t, 401, code, "%s with a wrong password: %s", path, body)
		}
		code, body, _ := c.do(t, http.MethodPost, p.URL+"/api/v1/admin/tsdb/snapshot", authUser, authPassword, nil, nil)
		require.Equal(t, 200, code, body)
		var snap struct{ Data struct{ Name string } }
		require.NoError(t, json.Unmarshal([]byte(body), &snap))
		require.NotEmpty(t, snap.Data.Name, body)
		require.DirExists(t, filepath.Join(p.DataDir, "snapshots", snap.Data.Name))
		code, body, _ = c.do(t, http.MethodPost, p.URL+"/-/reload", authUser, authPassword, nil, nil)
		require.Equal(t, 200, code, body)
		if exited, err := p.app.Exited(); exited {
			t.Fatalf("gpuscope stopped after refused /-/quit requests: %v", err)
		}
	})

	t.Run("CORS", func(t *testing.T) {
		for _, tc := range []struct{ origin, want string }{
			{"https://grafana.example.com", "https://grafana.example.com"},
			{"https://evil.example.com", ""},
			{"https://grafana.example.com.evil.example.com", ""},
		} {
			code, body, h := c.do(t, http.MethodGet, p.URL+"/api/v1/query?query=up", authUser, authPassword, nil, http.Header{"Origin": {tc.origin}})
			require.Equal(t, 200, code, body)
			require.Equal(t, tc.want, h.Get("Access-Control-Allow-Origin"), "Origin: %s", tc.origin)
		}
	})

	t.Run("request body limit", func(t *testing.T) {
		small := url.Values{"query": {"up"}}.Encode()
		large := url.Values{"query": {"up"}, "pad": {strings.Repeat("a", 8<<10)}}.Encode()
		form := http.Header{"Content-Type": {"application/x-www-form-urlencoded"}}
		for _, path := range []string{"/api/v1/query", "/api/v1/query_range", "/api/v1/admin/tsdb/delete_series", "/-/reload"} {
			code, body, _ := c.do(t, http.MethodPost, p.URL+path, authUser, authPassword, strings.NewReader(large), form)
			require.Equal(t, 413, code, "%s: %s", path, body)
			require.Contains(t, body, "request body larger than 4096 bytes")
		}
		code, body, _ := c.do(t, http.MethodPost, p.URL+"/api/v1/query", authUser, authPassword, strings.NewReader(small), form)
		require.Equal(t, 200, code, body)
	})

	// An appliance with the same web config and neither flag serves no
	// admin API and no lifecycle endpoints, not even with the password:
	// the admin API answers as Prometheus's does when disabled, the
	// lifecycle endpoints do not exist.
	t.Run("admin and lifecycle off by default", func(t *testing.T) {
		p2 := c.serve(t, configFile(writeConfig(t, t.TempDir(), "cadvisor: {enabled: false}\n")),
			with(func(s *app.Settings) { s.GPUBackend, s.WebConfigFile = "none", webConfig }))
		for _, path := range []string{"/api/v1/admin/tsdb/snapshot", "/api/v1/admin/tsdb/delete_series?match[]=up", "/api/v1/admin/tsdb/clean_tombstones"} {
			code, body, _ := c.do(t, http.MethodPost, p2.URL+path, authUser, authPassword, nil, nil)
			// Prometheus's answer, status included.
			require.Equal(t, http.StatusInternalServerError, code, "%s: %s", path, body)
			require.JSONEq(t, `{"status":"error","errorType":"unavailable","error":"admin APIs disabled"}`, body)
		}
		require.NoDirExists(t, filepath.Join(p2.DataDir, "snapshots"))
		for _, path := range []string{"/-/reload", "/-/quit"} {
			code, body, _ := c.do(t, http.MethodPost, p2.URL+path, authUser, authPassword, nil, nil)
			require.Equal(t, 404, code, "%s: %s", path, body)
		}
		code, body, _ := c.do(t, http.MethodGet, p2.URL+"/-/ready", authUser, authPassword, nil, nil)
		require.Equal(t, 200, code, "still running after /-/quit: %s", body)
	})
}

// writeTLSFiles writes a CA certificate and a server certificate for
// 127.0.0.1 and localhost signed by it, with the server's key.
func writeTLSFiles(t *testing.T, dir string) (caFile, certFile, keyFile string) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "gpuscope e2e CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	require.NoError(t, err)
	ca, err := x509.ParseCertificate(caDER)
	require.NoError(t, err)

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2),
		Subject:      pkix.Name{CommonName: "gpuscope e2e"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:     []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)

	caFile, certFile, keyFile = filepath.Join(dir, "ca.pem"), filepath.Join(dir, "server.pem"), filepath.Join(dir, "server-key.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o644))
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER}), 0o600))
	return caFile, certFile, keyFile
}

// httpsClient is a client that trusts the test's CA.
type httpsClient struct{ *http.Client }

func newHTTPSClient(t *testing.T, caFile string) httpsClient {
	t.Helper()
	caPEM, err := os.ReadFile(caFile)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	require.True(t, pool.AppendCertsFromPEM(caPEM))
	tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}
	t.Cleanup(tr.CloseIdleConnections)
	return httpsClient{&http.Client{Transport: tr, Timeout: 30 * time.Second}}
}

// do sends a request, with basic auth when user is set, and returns the
// status, body and headers of the answer.
func (c httpsClient) do(t *testing.T, method, u, user, password string, body io.Reader, h http.Header) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, u, body)
	require.NoError(t, err)
	for k, v := range h {
		req.Header[k] = v
	}
	if user != "" {
		req.SetBasicAuth(user, password)
	}
	resp, err := c.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b), resp.Header
}

// serve runs an appliance as the harness's serve does, reached over
// HTTPS.
func (c httpsClient) serve(t *testing.T, opts ...apptest.Option) *process {
	t.Helper()
	p := serve(t, "", opts...)
	p.URL = "https://" + p.app.Addr().String()
	return p
}

// vectorByLabel runs an instant query with the password and maps each
// result's label l to its value.
func (c httpsClient) vectorByLabel(p *process, q, l string) (map[string]float64, error) {
	req, err := http.NewRequest(http.MethodGet, p.URL+"/api/v1/query?"+url.Values{"query": {q}}.Encode(), nil)
	if err != nil {
		return nil, err
	}
	req.SetBasicAuth(authUser, authPassword)
	resp, err := c.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r struct {
		Status, Error string
		Data          struct {
			Result []struct {
				Metric map[string]string
				Value  [2]any
			}
		}
	}
	if err := json.NewDecoder(resp.Body).Decode(&r); err != nil {
		return nil, fmt.Errorf("%s: status %d: %w", q, resp.StatusCode, err)
	}
	if r.Status != "success" {
		return nil, fmt.Errorf("%s: %s", q, r.Error)
	}
	m := map[string]float64{}
	for _, s := range r.Data.Result {
		str, _ := s.Value[1].(string)
		v, err := strconv.ParseFloat(str, 64)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", q, err)
		}
		m[s.Metric[l]] = v
	}
	return m, nil
}
