package web

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/digest"
)

// TestWorkloadsAPI: /api/v1/workloads answers in the query API's
// envelope, over the real report, and says what is wrong with each bad
// parameter.
func TestWorkloadsAPI(t *testing.T) {
	h, srv := newTestHandler(t, Options{})
	code, _ := get(t, srv.URL+"/api/v1/workloads")
	require.Equal(t, http.StatusServiceUnavailable, code, "not before the TSDB is open, like the query API")
	h.SetReady(true)

	code, body := get(t, srv.URL+"/api/v1/workloads")
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `{"status":"success","data":[]}`, body, "a TSDB with no workloads: an empty list")

	resp, err := http.PostForm(srv.URL+"/api/v1/workloads", url.Values{"start": {"0"}, "end": {strconv.FormatInt(time.Now().Unix(), 10)}, "all": {"true"}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, "POST with a form, as Grafana sends queries")

	code, body = get(t, srv.URL+"/api/v1/workloads?by=user&by=label:team")
	require.Equal(t, http.StatusOK, code, body)
	require.JSONEq(t, `{"status":"success","data":[]}`, body, "grouped, no workloads: an empty list of groups")

	for _, q := range []string{"since=24h", "month=" + time.Now().UTC().Format("2006-01")} {
		code, body = get(t, srv.URL+"/api/v1/workloads?"+q)
		require.Equal(t, http.StatusOK, code, body)
		require.JSONEq(t, `{"status":"success","data":[]}`, body, q)
	}

	now := time.Now().UTC()
	for _, tc := range []struct {
		name, query, want string
	}{
		{"start unparsable", "start=yesterday", `invalid parameter "start": cannot parse "yesterday" to a valid timestamp (Unix seconds or RFC 3339)`},
		{"end unparsable", "end=NaN", `invalid parameter "end": cannot parse "NaN" to a valid timestamp (Unix seconds or RFC 3339)`},
		{"since and month", "since=7d&month=2026-11", `invalid parameters: since 7d and month 2026-11 both say what to report: give one`},
		{"since and start", "since=7d&start=0", `give start and end, or since or month, not both`},
		{"month unparsable", "month=November", `invalid parameters: month "November" is not a year and month (e.g. 2026-11)`},
		{"all not a boolean", "all=maybe", `invalid parameter "all": "maybe" is not true or false`},
		{"by unknown", "by=team", `invalid parameter "by": cannot group by "team": one of compose_project, compose_service, image, instance, runtime, slurm_job_id, slurm_user, user, workload, or label:<name> for any label`},
		{"empty range", "start=" + now.Format(time.RFC3339) + "&end=" + now.Format(time.RFC3339),
			"empty range: start " + now.Format(time.RFC3339) + " is not at least a second before end " + now.Format(time.RFC3339)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(t, srv.URL+"/api/v1/workloads?"+tc.query)
			require.Equal(t, http.StatusBadRequest, code, body)
			var env struct{ Status, ErrorType, Error string }
			require.NoError(t, json.Unmarshal([]byte(body), &env))
			require.Equal(t, "error", env.Status)
			require.Equal(t, "bad_data", env.ErrorType)
			require.Equal(t, tc.want, env.Error)
		})
	}
}

type fakeDigests struct{ ends []time.Time }

func (f *fakeDigests) Send(_ context.Context, end time.Time) (digest.Sent, error) {
	f.ends = append(f.ends, end)
	return digest.Sent{Start: end.Add(-time.Hour), End: end, Users: []string{"alice"}, Admin: true}, nil
}

// TestDigestsSendAPI: POST /api/v1/digests/send sends the digests now or
// for the period ending at end, and is privileged: refused (403) where
// the web config authenticates nobody, unless allowed.
func TestDigestsSendAPI(t *testing.T) {
	for _, allowed := range []bool{false, true} {
		f := &fakeDigests{}
		h, srv := newTestHandler(t, Options{AllowUnauthenticatedAdmin: allowed, API: &APIOptions{Digests: f}})
		h.SetReady(true)
		resp, err := http.Post(srv.URL+"/api/v1/digests/send?end=1796025600", "", nil)
		require.NoError(t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !allowed {
			require.Equal(t, http.StatusForbidden, resp.StatusCode, string(body))
			require.Empty(t, f.ends)
			continue
		}
		require.Equal(t, http.StatusOK, resp.StatusCode, string(body))
		require.JSONEq(t, `{"status":"success","data":{"start":"2026-11-30T07:00:00Z","end":"2026-11-30T08:00:00Z","users":["alice"],"admin":true}}`, string(body))
		require.Equal(t, []time.Time{time.Unix(1796025600, 0).UTC()}, f.ends)
		code, _ := get(t, srv.URL+"/api/v1/digests/send")
		require.Equal(t, http.StatusNotFound, code, "POST only: a GET falls through to the query API, which has no such path")
	}
}
