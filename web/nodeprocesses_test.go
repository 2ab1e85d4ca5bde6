package web

import (
	"context"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"net/url"
	"sync"
	"testing"

	config_util "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"
	promconfig "github.com/prometheus/prometheus/config"
	"github.com/prometheus/prometheus/model/labels"
	promscrape "github.com/prometheus/prometheus/scrape"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/scrape"
)

// TestNodeProcessesAsksAgents: an appliance answers for its own node
// from its collector and for another node by asking that node's agent,
// found among the node-gpu targets, with the nodes: section's basic
// auth; an unknown node, an agent's 404, an agent without the endpoint
// and one that is down are each said so.
func TestNodeProcessesAsksAgents(t *testing.T) {
	var (
		mu    sync.Mutex
		asked []string
	)
	agent := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		asked = append(asked, r.URL.String())
		mu.Unlock()
		if r.Header.Get("Authorization") != "Basic "+base64.StdEncoding.EncodeToString([]byte("gpuscope:s3cret")) {
			http.Error(w, "Unauthorized", http.StatusUnauthorized)
			return
		}
		switch r.URL.Query().Get("gpu") {
		case "":
			_, _ = w.Write([]byte(`{"status":"success","data":{"node":"n2","time":"2026-03-01T12:00:00Z","gpus":[{"gpu":"0","uuid":"GPU-x","model":"H100","read":true,"processes":[{"pid":7,"user":"alice","memory_bytes":5,"sm_percent":null}]}]}}`))
		case "9":
			w.WriteHeader(http.StatusNotFound)
			_, _ = w.Write([]byte(`{"status":"error","errorType":"not_found","error":"not found: node \"n2\" has no GPU \"9\""}`))
		default:
			http.NotFound(w, r) // an agent older than the endpoint
		}
	}))
	t.Cleanup(agent.Close)
	au, err := url.Parse(agent.URL)
	require.NoError(t, err)
	target := func(instance, address string) *promscrape.Target {
		return promscrape.NewTarget(labels.FromStrings(model.AddressLabel, address, model.SchemeLabel, "http",
			model.MetricsPathLabel, "/metrics/gpu", model.InstanceLabel, instance, model.JobLabel, scrape.JobNodeGPU),
			&promconfig.ScrapeConfig{JobName: scrape.JobNodeGPU}, nil, nil)
	}
	client := config_util.HTTPClientConfig{BasicAuth: &config_util.BasicAuth{Username: "gpuscope", Password: "s3cret"}}
	s := NewNodeProcesses(NodeProcessesOptions{
		Node: "n1",
		Targets: func() map[string][]*promscrape.Target {
			return map[string][]*promscrape.Target{
				scrape.JobNodeGPU:      {target("n2", au.Host), target("n3", "127.0.0.1:1")},
				scrape.JobNodeCadvisor: {target("n4", au.Host)},
			}
		},
		Client: func() config_util.HTTPClientConfig { return client },
	})
	ctx := context.Background()

	l, err := s.GPUProcesses(ctx, "", "")
	require.NoError(t, err)
	require.Equal(t, gpu.ProcessList{Node: "n1", GPUs: []gpu.GPUProcesses{}}, l, "this node, without a GPU collector")

	l, err = s.GPUProcesses(ctx, "n2", "")
	require.NoError(t, err)
	require.Equal(t, "n2", l.Node)
	require.Len(t, l.GPUs, 1)
	require.Equal(t, uint32(7), l.GPUs[0].Processes[0].PID)
	require.Equal(t, "alice", l.GPUs[0].Processes[0].User)
	mu.Lock()
	require.Equal(t, []string{"/api/v1/gpu/processes"}, asked)
	mu.Unlock()

	_, err = s.GPUProcesses(ctx, "n2", "9")
	require.ErrorIs(t, err, ErrNotFound)
	require.EqualError(t, err, `not found: node "n2": not found: node "n2" has no GPU "9"`)
	mu.Lock()
	require.Equal(t, "/api/v1/gpu/processes?gpu=9", asked[1])
	mu.Unlock()

	_, err = s.GPUProcesses(ctx, "n2", "1")
	require.NotErrorIs(t, err, ErrNotFound)
	require.ErrorContains(t, err, `node "n2"'s agent at `+au.Host+` answered 404 Not Found without a process list (an agent older than the endpoint?)`)

	_, err = s.GPUProcesses(ctx, "n3", "")
	require.NotErrorIs(t, err, ErrNotFound)
	require.ErrorContains(t, err, `ask node "n3"'s agent: `)

	for _, node := range []string{"n4", "n9"} {
		_, err = s.GPUProcesses(ctx, node, "")
		require.ErrorIs(t, err, ErrNotFound, "only node-gpu targets are agents to ask")
		require.ErrorContains(t, err, `"`+node+`" is neither this appliance's node ("n1") nor one of its nodes: section with an active target`)
	}

	client.BasicAuth.Password = "wrong"
	_, err = s.GPUProcesses(ctx, "n2", "")
	require.ErrorContains(t, err, "answered 401 Unauthorized without a process list", "the config in effect is used")

	agentSide := NewNodeProcesses(NodeProcessesOptions{Node: "n2"})
	_, err = agentSide.GPUProcesses(ctx, "n1", "")
	require.ErrorIs(t, err, ErrNotFound)
	require.EqualError(t, err, `not found: this agent is node "n2", not "n1"`)
}
