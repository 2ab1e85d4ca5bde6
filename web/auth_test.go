package web

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"
)

// writeCert writes a self-signed certificate for 127.0.0.1 and localhost
// and its key into dir.
func writeCert(t *testing.T, dir string) (certFile, keyFile string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "gpuscope test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		DNSNames:              []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	kder, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	require.NoError(t, os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644))
	require.NoError(t, os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600))
	return certFile, keyFile
}

func bcryptHash(t *testing.T, password string) string {
	t.Helper()
	h, err := bcrypt.GenerateFromPassword([]byte(password), bcrypt.MinCost)
	require.NoError(t, err)
	return string(h)
}

func TestCheckAuth(t *testing.T) {
	dir := t.TempDir()
	cert, key := writeCert(t, dir)
	write := func(name, text string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
		return p
	}
	tlsOnly := write("tls.yml", "tls_server_config:\n  cert_file: "+cert+"\n  key_file: "+key+"\n")
	users := write("users.yml", "basic_auth_users:\n  admin: "+bcryptHash(t, "s3cret")+"\n")
	clientCert := write("mtls.yml", "tls_server_config:\n  cert_file: "+cert+"\n  key_file: "+key+"\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: "+cert+"\n")
	plainPassword := write("plain.yml", "basic_auth_users:\n  admin: s3cret\n")
	unknownKey := write("unknown.yml", "basic_auth_user:\n  admin: x\n")
	missingCert := write("nocert.yml", "tls_server_config:\n  cert_file: /nonexistent/cert.pem\n  key_file: "+key+"\n")

	admin := []string{"--web.enable-admin-api"}
	for _, tc := range []struct {
		name       string
		file       string
		privileged []string
		allow      bool
		want       Auth
		err        string
	}{
		{name: "no file, nothing privileged", want: Auth{}},
		{name: "no file, admin", privileged: admin, err: "no --web.config.file is given"},
		{name: "no file, admin allowed", privileged: admin, allow: true},
		{name: "TLS only, nothing privileged", file: tlsOnly, want: Auth{TLS: true}},
		{name: "TLS only, lifecycle", file: tlsOnly, privileged: []string{"--web.enable-lifecycle"}, err: "sets no basic_auth_users"},
		{name: "basic auth, admin and lifecycle", file: users, privileged: []string{"--web.enable-admin-api", "--web.enable-lifecycle"}, want: Auth{BasicAuth: true}},
		{name: "client certificates, admin", file: clientCert, privileged: admin, want: Auth{TLS: true, ClientCert: true}},
		{name: "password not a bcrypt hash", file: plainPassword, err: "plain.yml"},
		{name: "unknown key", file: unknownKey, err: "basic_auth_user"},
		{name: "certificate missing", file: missingCert, err: "nocert.yml"},
		{name: "file missing", file: filepath.Join(dir, "absent.yml"), err: "absent.yml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := CheckAuth(tc.file, tc.privileged, tc.allow)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
	_, err := CheckAuth("", admin, false)
	require.ErrorIs(t, err, ErrUnauthenticatedAdmin)
	require.ErrorContains(t, err, "--web.allow-unauthenticated-admin")
}

// TestPrivilegedEndpointsFollowTheWebConfig: the admin API and the
// lifecycle endpoints answer only while the web config authenticates
// requests (the toolkit, in front, checks the credentials themselves).
func TestPrivilegedEndpointsFollowTheWebConfig(t *testing.T) {
	webConfig := filepath.Join(t.TempDir(), "web.yml")
	require.NoError(t, os.WriteFile(webConfig, []byte("basic_auth_users:\n  admin: "+bcryptHash(t, "pw")+"\n"), 0o644))
	base, _ := newTestHandler(t, Options{WebConfigFile: webConfig, EnableLifecycle: true})
	o := base.opts
	api := *o.API
	api.EnableAdmin = true
	o.API = &api
	reg := prometheus.NewRegistry()
	o.Gatherer, o.Registerer = reg, reg
	h := New(o)
	h.SetReady(true)
	srv := httptest.NewServer(h.echo)
	t.Cleanup(srv.Close)
	go func() {
		for rc := range h.Reload() {
			rc <- nil
		}
	}()

	post := func(path string) int {
		resp, err := http.Post(srv.URL+path, "", nil)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, 200, post("/-/reload"))
	require.Equal(t, 204, post("/api/v1/admin/tsdb/clean_tombstones"))
	require.Equal(t, 200, post("/api/v1/query?query=1"), "other API routes are unaffected")

	// The users are removed while running: refused, not opened.
	require.NoError(t, os.WriteFile(webConfig, []byte("{}\n"), 0o644))
	require.Equal(t, 403, post("/-/reload"))
	require.Equal(t, 403, post("/-/quit"))
	require.Equal(t, 403, post("/api/v1/admin/tsdb/snapshot"))
	require.Equal(t, 403, post("/api/v1/admin/tsdb/delete_series?match[]=demo"))
	require.Equal(t, 200, post("/api/v1/query?query=1"))
	select {
	case <-h.Quit():
		t.Fatal("/-/quit went through without authentication")
	default:
	}
}
