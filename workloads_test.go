package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestPrintWorkloadsBadInput: what each bad flag or answer gets. The
// client's answers to each kind of server are accounting's
// TestClientBadAnswer.
func TestPrintWorkloadsBadInput(t *testing.T) {
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
			err := printWorkloads(context.Background(), &b, workloadsRequest{server: tc.server, since: tc.since, format: "table", now: now})
			require.ErrorContains(t, err, tc.want)
			require.Empty(t, b.String(), "nothing printed on an error")
		})
	}
}
