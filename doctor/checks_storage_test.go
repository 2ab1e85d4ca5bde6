package doctor

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/config"
)

func TestDataDirCheck(t *testing.T) {
	tmp := t.TempDir()
	file := filepath.Join(tmp, "file")
	touch(t, file)
	withData := filepath.Join(tmp, "with-data")
	require.NoError(t, os.MkdirAll(filepath.Join(withData, "wal"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(withData, "wal", "00000000"), make([]byte, 3<<20), 0o644))
	for _, tc := range []struct {
		name      string
		dir       string
		retention int64
		status    string
		has       []string
	}{
		{"existing, no size limit", t.TempDir(), 0, StatusOK, []string{" writable, ", " free of ", "no size limit (storage.tsdb.retention.size 0)"}},
		{"with a TSDB", withData, 0, StatusOK, []string{"with-data writable", "TSDB 3MiB"}},
		{"to be created", filepath.Join(tmp, "a", "b", "data"), 0, StatusOK, []string{"data (to be created) writable"}},
		{"retention fits", t.TempDir(), 1 << 20, StatusOK, []string{"storage.tsdb.retention.size 1MiB fits"}},
		{"retention does not fit", t.TempDir(), 1 << 60, StatusWarn, []string{"storage.tsdb.retention.size 1EiB does not fit: the disk fills before retention deletes anything"}},
		{"a file in place of the directory", file, 0, StatusFail, []string{file + " is not a directory"}},
		{"under a file", filepath.Join(file, "data"), 0, StatusFail, []string{"data cannot be created: " + file + " is not a directory"}},
		// sysfs refuses new files even to root, unlike a chmod'ed directory.
		{"sysfs", "/sys", 0, StatusFail, []string{"/sys is not writable"}},
		{"under sysfs", "/sys/gpuscope-data", 0, StatusFail, []string{"/sys/gpuscope-data cannot be created: /sys is not writable"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Config: config.Default(nil), DataDir: tc.dir, RetentionSize: tc.retention}.withDefaults()
			c := dataDirCheck(&o)
			require.Equal(t, "data-dir", c.Name)
			require.Equal(t, tc.status, c.Status, c.Summary)
			for _, s := range tc.has {
				require.Contains(t, c.Summary, s)
			}
			if c.Status != StatusOK {
				require.NotEmpty(t, c.Hint)
			}
			left, _ := filepath.Glob(filepath.Join(filepath.Dir(tc.dir), ".gpuscope-doctor-*"))
			left2, _ := filepath.Glob(filepath.Join(tc.dir, ".gpuscope-doctor-*"))
			require.Empty(t, append(left, left2...), "the write test left files behind")
		})
	}
}

// As root every permission check passes (the sysfs cases above cover
// root); as another user a directory without w is unwritable.
func TestDataDirCheckPermission(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes to a directory of mode 0500; the sysfs cases of TestDataDirCheck cover an unwritable directory for root")
	}
	dir := t.TempDir()
	require.NoError(t, os.Chmod(dir, 0o500))
	t.Cleanup(func() { os.Chmod(dir, 0o700) })
	o := Options{Config: config.Default(nil), DataDir: dir}.withDefaults()
	c := dataDirCheck(&o)
	require.Equal(t, StatusFail, c.Status)
	require.Contains(t, c.Summary, "is not writable (permission denied)")
}

func TestRetentionFromConfig(t *testing.T) {
	cfg, err := config.Load([]byte("storage:\n  tsdb:\n    retention:\n      size: 1EB\n"), "", nil)
	require.NoError(t, err)
	o := Options{Config: cfg, DataDir: t.TempDir()}.withDefaults()
	c := dataDirCheck(&o)
	require.Equal(t, StatusWarn, c.Status)
	require.Contains(t, c.Summary, "storage.tsdb.retention.size 1EiB does not fit")
}

func TestListenCheck(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	gpuscope := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/-/healthy" {
			w.Write([]byte("gpuscope is Healthy.\n"))
			return
		}
		http.NotFound(w, r)
	}))
	defer gpuscope.Close()
	locked := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "Unauthorized", http.StatusUnauthorized)
	}))
	defer locked.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("Prometheus Server is Healthy.\n"))
	}))
	defer other.Close()
	free, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	freeAddr := free.Addr().String()
	free.Close()

	for _, tc := range []struct {
		name, addr, status, summary string
	}{
		{"free", freeAddr, StatusOK, freeAddr + " is free"},
		{"in use by a program that does not speak HTTP", busy.Addr().String(), StatusFail, busy.Addr().String() + " is in use by another program: serve cannot start"},
		{"in use by another HTTP server", other.Listener.Addr().String(), StatusFail, " is in use by another program"},
		{"in use by gpuscope", gpuscope.Listener.Addr().String(), StatusOK, gpuscope.Listener.Addr().String() + " is in use by a running gpuscope"},
		{"in use by a server asking for a password", locked.Listener.Addr().String(), StatusWarn, " asks for a password"},
		{"not an address of this machine", "192.0.2.1:9089", StatusFail, "cannot listen on 192.0.2.1:9089"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := Options{Config: config.Default(nil), ListenAddress: tc.addr}.withDefaults()
			c := listenCheck(context.Background(), &o)
			require.Equal(t, tc.status, c.Status, c.Summary)
			require.Contains(t, c.Summary, tc.summary)
			if c.Status != StatusOK {
				require.NotEmpty(t, c.Hint)
			}
			if strings.Contains(tc.name, "in use") && c.Status == StatusFail {
				require.Contains(t, c.Hint, "ss -ltnp")
			}
		})
	}
}
