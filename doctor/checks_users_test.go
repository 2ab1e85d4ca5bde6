package doctor

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/config"
)

func TestUsersCheck(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o644))
		return p
	}
	good := write("good", "root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000::/home/alice:/bin/sh\n")
	bad := write("bad", "root:x:0:0:root:/root:/bin/sh\nalice:x:1000\n# ok\nbob:x:x:1::/:/bin/sh\n")
	for _, tc := range []struct {
		name, file, status, summary, hint string
	}{
		{"readable", good, StatusOK, "user names from " + good + " (2 users; others show as uids)", ""},
		{"absent", filepath.Join(dir, "absent"), StatusWarn, "cannot read " + filepath.Join(dir, "absent") + ": open " + filepath.Join(dir, "absent") + ": no such file or directory: the user label shows uids, not names", "mount the host's root at /rootfs"},
		{"a directory", dir, StatusWarn, "is a directory: the user label shows uids, not names", "workloads.passwd_file"},
		{"malformed lines", bad, StatusWarn, bad + ": 2 malformed lines skipped (the first is line 2): their uids show as numbers; 1 users named", "pwck -r " + bad},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := config.Default(nil)
			cfg.Workloads.PasswdFile = tc.file
			o := Options{Config: cfg}.withDefaults()
			checks := userChecks(context.Background(), &o)
			require.Len(t, checks, 1)
			c := checks[0]
			require.Equal(t, "users", c.Name)
			require.Equal(t, tc.status, c.Status)
			require.Contains(t, c.Summary, tc.summary)
			require.Contains(t, c.Hint, tc.hint)
		})
	}
}

// TestUnnamedUsersCheck: the running gpuscope's users that show as uids
// are listed with their nodes, and the hint says how to name them; with
// none there is no line; an appliance that cannot be asked says so.
func TestUnnamedUsersCheck(t *testing.T) {
	for _, tc := range []struct {
		name    string
		result  []map[string]string
		status  string
		summary string
	}{
		{"all named", nil, "", ""},
		{"uids", []map[string]string{{"instance": "gpu-02", "user": "1001"}, {"instance": "gpu-01", "user": "1001"}, {"instance": "gpu-01", "user": "200"}}, StatusWarn,
			"2 users show as uids, which the passwd gpuscope reads does not name: 200 (on gpu-01); 1001 (on gpu-01, gpu-02); their workloads are reported and grouped by uid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				require.Contains(t, r.URL.Query().Get("query"), `user=~"[0-9]+"`)
				var result []any
				for _, m := range tc.result {
					result = append(result, map[string]any{"metric": m, "value": []any{1.7e9, "1"}})
				}
				_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": map[string]any{"resultType": "vector", "result": result}})
			}))
			t.Cleanup(srv.Close)
			o := Options{Config: config.Default(nil), URL: srv.URL}.withDefaults()
			c, found := unnamedUsersCheck(context.Background(), &o)
			require.Equal(t, tc.status != "", found)
			if !found {
				return
			}
			require.Equal(t, "users/unnamed", c.Name)
			require.Equal(t, tc.status, c.Status)
			require.Equal(t, tc.summary, c.Summary)
			if tc.status == StatusWarn {
				require.Contains(t, c.Hint, "getent passwd")
			}
		})
	}
	srv := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(srv.Close)
	o := Options{Config: config.Default(nil), URL: srv.URL}.withDefaults()
	c, found := unnamedUsersCheck(context.Background(), &o)
	require.True(t, found)
	require.Equal(t, StatusWarn, c.Status)
	require.Contains(t, c.Summary, "cannot ask the running gpuscope for its users")
}
