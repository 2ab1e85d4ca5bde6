package accounting

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPrintBadInput: what each bad flag or answer gets. The
// client's answers to each kind of server are accounting's
// TestClientBadAnswer.
func TestPrintBadInput(t *testing.T) {
	now := time.Now()
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.NotFound(w, r)
	}))
	t.Cleanup(agent.Close)

	for _, tc := range []struct {
		name, server, since, want string
	}{
		{"since unparsable", "http://localhost:9089", "yesterday", `--since "yesterday" is not a positive duration (e.g. 30m, 24h, 7d)`},
		{"since zero", "http://localhost:9089", "0s", `--since "0s" is not a positive duration (e.g. 30m, 24h, 7d)`},
		{"url without scheme", "localhost:9089", "1h", `--url "localhost:9089" is not an http:// or https:// address (e.g. http://localhost:9089)`},
		{"an agent", agent.URL, "1h", "has no /api/v1/workloads (a `gpuscope agent`, an older gpuscope, or not gpuscope): 404 Not Found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			err := Print(context.Background(), &b, io.Discard, PrintRequest{Server: tc.server, Since: tc.since, Format: "table", Now: now})
			require.ErrorContains(t, err, tc.want)
			require.Empty(t, b.String(), "nothing printed on an error")
		})
	}
}

// TestPrintGrouped: --by asks the API for the sums by user and
// prints them, a run without a user as (unknown); a bad --by is refused
// before anything is asked.
func TestPrintGrouped(t *testing.T) {
	var asked string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		asked = r.URL.Query().Get("by")
		_, _ = w.Write([]byte(`{"status":"success","data":[` +
			`{"group":{"user":"alice"},"runs":2,"gpu_hours":3.5,"idle_gpu_hours":0.5,"sm_share_avg":0.4,"gpu_memory_max_bytes":2147483648,"energy_kwh":1.25,"cpu_core_seconds":10},` +
			`{"group":{"user":""},"runs":1,"gpu_hours":1,"idle_gpu_hours":0,"sm_share_avg":0.9,"gpu_memory_max_bytes":0,"energy_kwh":null,"cpu_core_seconds":0}]}`))
	}))
	t.Cleanup(srv.Close)
	var b bytes.Buffer
	err := Print(context.Background(), &b, io.Discard, PrintRequest{Server: srv.URL, By: []string{"user"}, Format: "table", Now: time.Now()})
	require.NoError(t, err)
	require.Equal(t, "user", asked)
	require.Regexp(t, `(?m)^USER\s+RUNS\s+GPU-H\s+IDLE GPU-H\s+SM AVG\s+GPU MEM PEAK\s+KWH\s+CPU-S\n`+
		`alice\s+2\s+3\.50\s+0\.50\s+40%\s+2\.0 GiB\s+1\.250\s+10\n`+
		`\(unknown\)\s+1\s+1\.00\s+0\.00\s+90%\s+-\s+-\s+0\n$`, b.String())

	b.Reset()
	err = Print(context.Background(), &b, io.Discard, PrintRequest{Server: srv.URL, By: []string{"user,team"}, Format: "table", Now: time.Now()})
	require.ErrorContains(t, err, `--by: cannot group by "team": one of`)
}
