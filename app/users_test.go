package app_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/app/apptest"
	"github.com/gpuscope/gpuscope/gpu"
)

// TestUserSessions: work outside any container, on a node that runs
// `gpuscope agent` for an appliance. A process of uid 1000 runs in a
// login session's cgroup (user-1000.slice/session-N.scope) and is a
// simulated GPU's process; uid 1000 has a user service too
// (user@1000.service/app.slice/jupyter-N.service). With a passwd naming
// uid 1000 alice, the appliance stores cAdvisor's and the GPU's series of
// the session as workload "alice: session-N" with user="alice", the
// service as "alice: jupyter-N.service"; the opt-in per-process series
// carry the pid, alice and the process's name; and the appliance's
// /api/v1/gpu/processes?node= asks the agent for its GPU processes,
// listing the process with its user, command and workload, as the agent
// itself does. An unknown node is a 404.
func TestUserSessions(t *testing.T) {
	t.Parallel()
	n := rand.IntN(1e6)
	base := fmt.Sprintf("gpuscope-e2e-users-%d", n)
	var session, jupyter *apptest.Cgroup
	for _, d := range []string{"", "/user.slice", "/user.slice/user-1000.slice", "/user.slice/user-1000.slice/session-" + strconv.Itoa(n) + ".scope"} {
		session = newCgroup(t, base+d)
	}
	for _, d := range []string{"/user.slice/user-1000.slice/user@1000.service", "/user.slice/user-1000.slice/user@1000.service/app.slice",
		"/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter-" + strconv.Itoa(n) + ".service"} {
		jupyter = newCgroup(t, base+d)
	}
	pid := session.RunAs(t, 1000, "sleep", "600")

	const node = "node-u"
	agent := startAgent(t, node, writeConfig(t, t.TempDir(), fmt.Sprintf(`
global:
  scrape_interval: 1s
gpu:
  families: {per_process: true}
  sim:
    count: 1
    gpus: [{scenario: training, pid: %d}]
workloads:
  passwd_file: %s
`, pid, passwdFixture(t))))
	p := serve(t, "", configFile(writeConfig(t, t.TempDir(), fmt.Sprintf(`
global:
  scrape_interval: 1s
  evaluation_interval: 1s
cadvisor: {enabled: false}
gpu: {backend: none}
nodes:
  static: [{address: %s, name: %s}]
`, agent.addr(), node))))

	sessionName := "alice: session-" + strconv.Itoa(n)
	for _, tc := range []struct {
		query string
		want  model.Metric
	}{
		{fmt.Sprintf(`container_memory_usage_bytes{instance=%q, id=%q}`, node, session.ID),
			model.Metric{"workload": model.LabelValue(sessionName), "runtime": "systemd", "user": "alice"}},
		{fmt.Sprintf(`container_memory_usage_bytes{instance=%q, id=%q}`, node, jupyter.ID),
			model.Metric{"workload": model.LabelValue("alice: jupyter-" + strconv.Itoa(n) + ".service"), "runtime": "systemd", "user": "alice"}},
		{fmt.Sprintf(`gpuscope_gpu_container_memory_used_bytes{instance=%q}`, node),
			model.Metric{"id": model.LabelValue(session.ID), "workload": model.LabelValue(sessionName), "runtime": "systemd", "user": "alice"}},
		{fmt.Sprintf(`gpuscope_gpu_process_memory_used_bytes{instance=%q}`, node),
			model.Metric{"pid": model.LabelValue(strconv.Itoa(pid)), "user": "alice", "comm": "sleep", "id": model.LabelValue(session.ID)}},
	} {
		eventually(t, 60*time.Second, tc.query, func() error {
			v, err := p.instant(tc.query)
			if err != nil {
				return err
			}
			if len(v) != 1 {
				return fmt.Errorf("%d series, want 1: %v", len(v), v)
			}
			for k, want := range tc.want {
				if got := v[0].Metric[k]; got != want {
					return fmt.Errorf("%s=%q, want %q (%v)", k, got, want, v[0].Metric)
				}
			}
			return nil
		})
	}

	for _, srv := range []struct{ name, url string }{
		{"the appliance, asking the agent", p.URL + "/api/v1/gpu/processes?node=" + node + "&gpu=0"},
		{"the agent itself", agent.URL + "/api/v1/gpu/processes"},
	} {
		t.Run(srv.name, func(t *testing.T) {
			resp, err := http.Get(srv.url)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, http.StatusOK, resp.StatusCode)
			var env struct {
				Status string          `json:"status"`
				Data   gpu.ProcessList `json:"data"`
			}
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&env))
			require.Equal(t, "success", env.Status)
			require.Equal(t, node, env.Data.Node)
			require.Len(t, env.Data.GPUs, 1)
			g := env.Data.GPUs[0]
			require.True(t, g.Read)
			require.Len(t, g.Processes, 1)
			pr := g.Processes[0]
			require.Equal(t, uint32(pid), pr.PID)
			require.Equal(t, "1000", pr.UID)
			require.Equal(t, "alice", pr.User)
			require.Equal(t, "sleep", pr.Name)
			require.Equal(t, "sleep 600", pr.Command)
			require.NotNil(t, pr.MemoryBytes)
			require.Positive(t, *pr.MemoryBytes)
			require.NotNil(t, pr.Container)
			require.Equal(t, gpu.ProcessContainer{ID: session.ID, Workload: sessionName, Runtime: "systemd", User: "alice"}, *pr.Container)
		})
	}

	// The pages of this young appliance, live (the range ends now): the
	// GPU page's table and the overview's card list the process the
	// agent reads, with its user and command.
	code, body := p.get("/gpu/" + node + "/0")
	require.Equal(t, http.StatusOK, code, body)
	require.Regexp(t, `<tr class="process" data-pid="`+strconv.Itoa(pid)+`"><td>`+strconv.Itoa(pid)+`</td><td>alice</td><td><code>sleep 600</code>`, body)
	code, body = p.get("/?node=" + node)
	require.Equal(t, http.StatusOK, code, body)
	require.Contains(t, body, `<li class="gpu-process" data-pid="`+strconv.Itoa(pid)+`">`+strconv.Itoa(pid)+` <span class="user">alice</span> <code>sleep 600</code>`)

	code, body = p.get("/api/v1/gpu/processes?node=nosuch")
	require.Equal(t, http.StatusNotFound, code, body)
	require.Contains(t, body, `"errorType":"not_found"`)
	require.Contains(t, body, `\"nosuch\" is neither this appliance's node`)
}
