package web

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

	now := time.Now().UTC()
	for _, tc := range []struct {
		name, query, want string
	}{
		{"start unparsable", "start=yesterday", `invalid parameter "start": cannot parse "yesterday" to a valid timestamp (Unix seconds or RFC 3339)`},
		{"end unparsable", "end=NaN", `invalid parameter "end": cannot parse "NaN" to a valid timestamp (Unix seconds or RFC 3339)`},
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
