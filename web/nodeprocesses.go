package web

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	config_util "github.com/prometheus/common/config"
	"github.com/prometheus/prometheus/model/labels"
	promscrape "github.com/prometheus/prometheus/scrape"

	"github.com/gpuscope/gpuscope/gpu"
	"github.com/gpuscope/gpuscope/scrape"
)

// NodeProcessesOptions says where a NodeProcesses finds the processes.
type NodeProcessesOptions struct {
	// Node is this node's name, the answer for node "".
	Node string
	// Local is this node's GPU collector, nil when gpu.backend is none.
	Local *gpu.Collector
	// Targets and Client are nil on an agent, which has no nodes: the
	// scrape manager's active targets, among which the node-gpu job's are
	// the agents to ask, and the nodes: section's HTTP client config in
	// effect.
	Targets func() map[string][]*promscrape.Target
	Client  func() config_util.HTTPClientConfig
	// Timeout bounds a question to an agent (default 5 s).
	Timeout time.Duration
}

// NodeProcesses is the GPUProcessSource of serve and agent: this node's
// GPU processes from its collector and, on an appliance, an agent's from
// the agent's own endpoint, asked with the nodes: section's HTTP client
// config (TLS, basic auth) as the agent's scrapes are made. Nothing is
// stored.
type NodeProcesses struct {
	node    string
	local   *gpu.Collector
	targets func() map[string][]*promscrape.Target
	client  func() config_util.HTTPClientConfig
	timeout time.Duration
}

// NewNodeProcesses returns the source o describes.
func NewNodeProcesses(o NodeProcessesOptions) *NodeProcesses {
	return &NodeProcesses{node: o.Node, local: o.Local, targets: o.Targets, client: o.Client, timeout: o.Timeout}
}

// agentProcessesTimeout bounds a question to an agent.
const agentProcessesTimeout = 5 * time.Second

// maxProcessListBytes bounds an agent's answer: eight GPUs with hundreds
// of processes are some hundred KB.
const maxProcessListBytes = 16 << 20

// GPUProcesses implements GPUProcessSource.
func (s *NodeProcesses) GPUProcesses(ctx context.Context, node, gpuSel string) (gpu.ProcessList, error) {
	if node == "" || node == s.node {
		if s.local == nil {
			// gpu.backend: none: a node without GPUs to list.
			return gpu.ProcessList{Node: s.node, GPUs: []gpu.GPUProcesses{}}, nil
		}
		return s.local.Processes(gpuSel), nil
	}
	u := s.agentURL(node)
	if u == nil {
		if s.targets == nil {
			return gpu.ProcessList{}, fmt.Errorf("%w: this agent is node %q, not %q", ErrNotFound, s.node, node)
		}
		return gpu.ProcessList{}, fmt.Errorf("%w: %q is neither this appliance's node (%q) nor one of its nodes: section with an active target", ErrNotFound, node, s.node)
	}
	if gpuSel != "" {
		u.RawQuery = url.Values{"gpu": {gpuSel}}.Encode()
	}
	return s.ask(ctx, node, u)
}

// agentURL is the /api/v1/gpu/processes of node's agent, nil when no
// active node-gpu target is node.
func (s *NodeProcesses) agentURL(node string) *url.URL {
	if s.targets == nil {
		return nil
	}
	lb := labels.NewBuilder(labels.EmptyLabels())
	for _, t := range s.targets()[scrape.JobNodeGPU] {
		if t.Labels(lb).Get("instance") == node {
			u := t.URL()
			u.Path, u.RawQuery = "/api/v1/gpu/processes", ""
			return u
		}
	}
	return nil
}

// ask gets an agent's process list.
func (s *NodeProcesses) ask(ctx context.Context, node string, u *url.URL) (gpu.ProcessList, error) {
	client, err := config_util.NewClientFromConfig(s.client(), "gpu-processes")
	if err != nil {
		return gpu.ProcessList{}, fmt.Errorf("HTTP client for node %q (nodes: section): %w", node, err)
	}
	defer client.CloseIdleConnections()
	timeout := s.timeout
	if timeout <= 0 {
		timeout = agentProcessesTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return gpu.ProcessList{}, fmt.Errorf("ask node %q: %w", node, err)
	}
	resp, err := client.Do(req)
	if err != nil {
		return gpu.ProcessList{}, fmt.Errorf("ask node %q's agent: %w", node, err)
	}
	defer resp.Body.Close()
	var env struct {
		Status string          `json:"status"`
		Data   gpu.ProcessList `json:"data"`
		Error  string          `json:"error"`
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxProcessListBytes))
	if err != nil {
		return gpu.ProcessList{}, fmt.Errorf("read node %q's answer: %w", node, err)
	}
	if jerr := json.Unmarshal(body, &env); jerr != nil || (resp.StatusCode != http.StatusOK && env.Error == "") {
		// Not gpuscope's envelope: an older agent without the endpoint,
		// or something else at that address.
		return gpu.ProcessList{}, fmt.Errorf("node %q's agent at %s answered %s without a process list (an agent older than the endpoint?)", node, u.Host, resp.Status)
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return gpu.ProcessList{}, fmt.Errorf("%w: node %q: %s", ErrNotFound, node, env.Error)
	case resp.StatusCode != http.StatusOK:
		return gpu.ProcessList{}, fmt.Errorf("node %q's agent: %s", node, env.Error)
	}
	return env.Data, nil
}
