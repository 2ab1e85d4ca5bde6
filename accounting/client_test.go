package accounting

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestClientReport: the client asks for the query's range to the second
// and gives back the runs and warnings of the API's answer.
func TestClientReport(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 500_000_000, time.UTC)
	runs := sampleRuns(now.Truncate(time.Second))
	var path string
	var asked url.Values
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path, asked = r.URL.Path, r.URL.Query()
		_ = json.NewEncoder(w).Encode(map[string]any{"status": "success", "data": runs, "warnings": []string{"careful"}})
	}))
	t.Cleanup(srv.Close)
	base, err := url.Parse(srv.URL + "/prefix")
	require.NoError(t, err)
	c, err := NewClient(ClientOptions{URL: base})
	require.NoError(t, err)

	rep, err := c.Report(context.Background(), Query{Start: now.Add(-time.Hour), End: now, All: true})
	require.NoError(t, err)
	require.Equal(t, "/prefix/api/v1/workloads", path)
	require.Equal(t, url.Values{"start": {"1796122800"}, "end": {"1796126400"}, "all": {"true"}}, asked)
	require.Len(t, rep.Runs, 2)
	require.Equal(t, runs[1].Workload, rep.Runs[1].Workload)
	require.True(t, runs[0].Start.Equal(rep.Runs[0].Start))
	require.Equal(t, []string{"careful"}, rep.Warnings)

	_, err = c.Report(context.Background(), Query{})
	require.NoError(t, err)
	require.Empty(t, asked, "a zero range is the server's default")

	_, err = NewClient(ClientOptions{})
	require.EqualError(t, err, "accounting: the URL of a gpuscope is required")
}

// TestClientBadAnswer: what each unreachable or wrong server gets.
func TestClientBadAnswer(t *testing.T) {
	answer := func(status int, body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.WriteHeader(status)
			_, _ = w.Write([]byte(body))
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	closed := "http://" + l.Addr().String()
	require.NoError(t, l.Close())
	now := time.Now()
	report := func(server string) (Report, error) {
		base, err := url.Parse(server)
		require.NoError(t, err)
		c, err := NewClient(ClientOptions{URL: base})
		require.NoError(t, err)
		return c.Report(context.Background(), Query{Start: now.Add(-time.Hour), End: now})
	}

	for _, tc := range []struct {
		name, server, want string
	}{
		{"unreachable", closed, "cannot reach gpuscope at " + closed + ": "},
		{"an agent", answer(404, "404 page not found"), "has no /api/v1/workloads (a `gpuscope agent`, an older gpuscope, or not gpuscope): 404 Not Found"},
		{"credentials", answer(401, "Unauthorized"), "asks for credentials (401 Unauthorized): give them in --url as http://user:password@host:port"},
		{"an API error", answer(400, `{"status":"error","errorType":"bad_data","error":"empty range: start … is not at least a second before end …"}`), ": empty range: start"},
		{"not gpuscope", answer(200, "<html>hello</html>"), `answered 200 OK: "<html>hello</html>"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rep, err := report(tc.server)
			require.ErrorContains(t, err, tc.want)
			require.Empty(t, rep.Runs)
		})
	}

	// A password in the URL never shows in a message.
	_, err = report("http://admin:s3cret@" + l.Addr().String())
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret")
}
