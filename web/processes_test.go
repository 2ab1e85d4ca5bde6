package web

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
)

// fakeProcesses is a GPUProcessSource with one node, n1, whose GPU 0 runs
// one process; node "down" cannot be asked.
type fakeProcesses struct{}

func (fakeProcesses) GPUProcesses(_ context.Context, node, gpuSel string) (gpu.ProcessList, error) {
	switch node {
	case "", "n1":
	case "down":
		return gpu.ProcessList{}, errors.New("ask agent down:9089: connection refused")
	default:
		return gpu.ProcessList{}, fmt.Errorf("%w: %q is not a node of this appliance", ErrNotFound, node)
	}
	mem := uint64(1 << 30)
	l := gpu.ProcessList{Node: "n1", Time: time.Unix(1700000000, 0).UTC(), GPUs: []gpu.GPUProcesses{}}
	if gpuSel == "" || gpuSel == "0" {
		l.GPUs = append(l.GPUs, gpu.GPUProcesses{GPU: "0", UUID: "GPU-0", Model: "H100", Read: true, Processes: []gpu.Process{
			{PID: 42, UID: "1000", User: "alice", Name: "python", Command: "python <train>.py", MemoryBytes: &mem,
				Container: &gpu.ProcessContainer{ID: "/user.slice/user-1000.slice/session-3.scope", Workload: "alice: session-3", Runtime: "systemd", User: "alice"}},
		}})
	}
	return l, nil
}

// TestGPUProcessesAPI: /api/v1/gpu/processes in the query API's envelope,
// on serve (with the API) and agent (without) alike; a node or GPU that
// does not exist is a 404 saying which, an agent that cannot be asked a
// 503 saying why.
func TestGPUProcessesAPI(t *testing.T) {
	_, serve := newTestHandler(t, Options{GPUProcesses: fakeProcesses{}})
	agent := httptest.NewServer(New(Options{GPUProcesses: fakeProcesses{}}).echo)
	t.Cleanup(agent.Close)
	for _, srv := range []string{serve.URL, agent.URL} {
		code, body := get(t, srv+"/api/v1/gpu/processes")
		require.Equal(t, http.StatusOK, code, body)
		require.JSONEq(t, `{"status":"success","data":{"node":"n1","time":"2023-11-14T22:13:20Z","gpus":[
			{"gpu":"0","uuid":"GPU-0","model":"H100","read":true,"processes":[
				{"pid":42,"uid":"1000","user":"alice","name":"python","command":"python <train>.py","memory_bytes":1073741824,"sm_percent":null,
				 "container":{"id":"/user.slice/user-1000.slice/session-3.scope","workload":"alice: session-3","runtime":"systemd","user":"alice"}}]}]}}`, body)
	}
	for _, tc := range []struct {
		name, query string
		code        int
		errorType   string
		err         string
	}{
		{"this node by name, one GPU", "?node=n1&gpu=0", http.StatusOK, "", ""},
		{"unknown node", "?node=n9", http.StatusNotFound, "not_found", `not found: "n9" is not a node of this appliance`},
		{"unknown GPU", "?gpu=7", http.StatusNotFound, "not_found", `not found: node "n1" has no GPU "7" (a GPU index or UUID)`},
		{"an agent that cannot be asked", "?node=down", http.StatusServiceUnavailable, "unavailable", "ask agent down:9089: connection refused"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := get(t, serve.URL+"/api/v1/gpu/processes"+tc.query)
			require.Equal(t, tc.code, code, body)
			var env struct{ Status, ErrorType, Error string }
			require.NoError(t, json.Unmarshal([]byte(body), &env))
			require.Equal(t, tc.errorType, env.ErrorType)
			require.Equal(t, tc.err, env.Error)
		})
	}

	// Without a source there is no such endpoint on an agent, and the
	// query API's own 404 on serve.
	bare := httptest.NewServer(New(Options{}).echo)
	t.Cleanup(bare.Close)
	code, _ := get(t, bare.URL+"/api/v1/gpu/processes")
	require.Equal(t, http.StatusNotFound, code)
}

// processesFunc is a GPUProcessSource made of a function.
type processesFunc func(ctx context.Context, node, gpuSel string) (gpu.ProcessList, error)

func (f processesFunc) GPUProcesses(ctx context.Context, node, gpuSel string) (gpu.ProcessList, error) {
	return f(ctx, node, gpuSel)
}

// TestPagesListGPUProcesses: the GPU page and the overview's card list
// the processes a GPU runs now (pid, user, command, GPU memory, its
// workload), from the same source as /api/v1/gpu/processes; a range in
// the past lists none; a node that cannot be asked says why on its
// card and page; a node processes cannot be asked of (only stored here)
// shows no list and no error.
func TestPagesListGPUProcesses(t *testing.T) {
	now := historyEnd
	past := "&to=" + formatNum(unixSeconds(historyEnd.Add(-time.Hour)))
	process := func(t *testing.T, body string) string {
		t.Helper()
		m := regexp.MustCompile(`(?s)<tr class="process" data-pid="42">.*?</tr>`).FindString(body)
		require.NotEmpty(t, m, body)
		return m
	}

	f := newHistoryWith(t, now, func(o *Options) { o.GPUProcesses = fakeProcesses{} })
	code, body := get(t, f.srv.URL+"/gpu/n1/0")
	require.Equal(t, http.StatusOK, code, body)
	row := process(t, body)
	for _, want := range []string{">42<", ">alice<", "<code>python &lt;train&gt;.py</code>", `data-memory="1073741824">1.0 GiB<`,
		`<a href="workload/alice:%20session-3"><code>alice: session-3</code></a>`} {
		require.Contains(t, row, want)
	}
	require.Contains(t, body, "As the driver listed them at 22:13:20 UTC.")

	code, body = get(t, f.srv.URL+"/gpu/n1/0?range=1h"+past)
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, `id="processes"`, "a range in the past has no live list")

	code, body = get(t, f.srv.URL+"/?node=n1")
	require.Equal(t, http.StatusOK, code, body)
	card := body[strings.Index(body, `<section class="gpu-card" data-instance="n1" data-gpu="0"`):]
	card = card[:strings.Index(card, "</section>")]
	require.Contains(t, card, `<ul class="processes" data-field="processes" data-value="1"><li class="gpu-process" data-pid="42">42 <span class="user">alice</span> <code>python &lt;train&gt;.py</code> 1.0 GiB</li></ul>`)
	code, body = get(t, f.srv.URL+"/?node=n1&range=1h"+past)
	require.Equal(t, http.StatusOK, code, body)
	require.NotContains(t, body, `class="gpu-process"`)

	for _, tc := range []struct {
		name string
		err  error
		want string // on the page and the card; "" for nothing
	}{
		{"an agent that does not answer", errors.New("ask node \"n1\": context deadline exceeded"), `ask node &#34;n1&#34;: context deadline exceeded`},
		{"a node only stored here", fmt.Errorf("%w: not a node", ErrNotFound), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newHistoryWith(t, now, func(o *Options) {
				o.GPUProcesses = processesFunc(func(context.Context, string, string) (gpu.ProcessList, error) { return gpu.ProcessList{}, tc.err })
			})
			_, page := get(t, f.srv.URL+"/gpu/n1/0")
			_, overview := get(t, f.srv.URL+"/?node=n1")
			if tc.want == "" {
				require.NotContains(t, page, `id="processes"`)
				require.NotContains(t, overview, `data-field="processes"`)
				return
			}
			require.Contains(t, page, `<section id="processes"><h2>Processes now</h2><p class="error">`+tc.want+`</p>`)
			require.Contains(t, overview, `<p class="error" data-field="processes">processes: `+tc.want+`</p>`)
		})
	}
}
