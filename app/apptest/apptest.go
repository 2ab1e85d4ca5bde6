// Package apptest runs gpuscope appliances and agents inside a test's own
// process, on loopback ports and temporary directories, so that the
// wired appliance is tested under the race detector and without a
// compiled binary; and it holds what a test asks of a running gpuscope,
// in process or not: its Prometheus API, its pages, and waits on its
// state.
package apptest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"github.com/prometheus/common/promslog"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/app"
	"github.com/gpuscope/gpuscope/packaging/pkgtest"
)

// NodeName is the node name the appliances of the tests run as.
const NodeName = "e2e-node"

// Client asks a running gpuscope at URL.
type Client struct {
	T   testing.TB
	URL string
}

// API is a Prometheus API client for the appliance, as Grafana would use
// it.
func (c Client) API() promv1.API {
	c.T.Helper()
	cl, err := api.NewClient(api.Config{Address: c.URL})
	require.NoError(c.T, err)
	return promv1.NewAPI(cl)
}

// Instant runs an instant query now and returns its vector.
func (c Client) Instant(q string) (model.Vector, error) { return c.QueryAt(q, time.Now()) }

// QueryAt runs an instant query at ts and returns its vector.
func (c Client) QueryAt(q string, ts time.Time) (model.Vector, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, _, _, err := c.API().Query(ctx, q, ts)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", q, err)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("%s: result is %s, not a vector", q, v.Type())
	}
	return vec, nil
}

// Firing says whether /api/v1/alerts has the alert firing for the GPU.
func (c Client) Firing(alertname, gpu string) error {
	return c.listed(alertname, gpu, promv1.AlertStateFiring)
}

// Active is Firing, or pending: for an alert whose condition hangs on a
// CPU burner getting its CPU, which a loaded machine may take from it for
// a moment and so send a firing alert back to pending.
func (c Client) Active(alertname, gpu string) error {
	return c.listed(alertname, gpu, promv1.AlertStateFiring, promv1.AlertStatePending)
}

func (c Client) listed(alertname, gpu string, states ...promv1.AlertState) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	alerts, err := c.API().Alerts(ctx)
	if err != nil {
		return err
	}
	for _, a := range alerts.Alerts {
		if string(a.Labels["alertname"]) == alertname && string(a.Labels["gpu"]) == gpu && slices.Contains(states, a.State) {
			return nil
		}
	}
	return fmt.Errorf("%s for GPU %s not %v in /api/v1/alerts: %v", alertname, gpu, states, alerts.Alerts)
}

// Get fetches a URL path and returns status and body.
func (c Client) Get(path string) (int, string) {
	c.T.Helper()
	resp, err := http.Get(c.URL + path)
	require.NoError(c.T, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.T, err)
	return resp.StatusCode, string(b)
}

// Post sends a form-encoded body to path (with its own query string, if
// any) as Grafana does.
func (c Client) Post(path, form string) (int, string) {
	c.T.Helper()
	resp, err := http.Post(c.URL+path, "application/x-www-form-urlencoded", strings.NewReader(form))
	require.NoError(c.T, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(c.T, err)
	return resp.StatusCode, string(b)
}

// Eventually polls f until it returns nil, or fails the test once
// timeout has passed. The timeout is a bound on a hung test, not a
// measurement: what f checks is the state itself.
func Eventually(t testing.TB, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var err error
	for time.Now().Before(deadline) {
		if err = f(); err == nil {
			return
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("%s: not true after %s: %v", what, timeout, err)
}

// WriteConfig writes a config file named gpuscope.yml into dir and
// returns its path.
func WriteConfig(t testing.TB, dir, text string) string {
	t.Helper()
	p := dir + "/gpuscope.yml"
	require.NoError(t, os.WriteFile(p, []byte(text), 0o644))
	return p
}

// Appliance is a gpuscope serve running in the test's process.
type Appliance struct {
	*app.Appliance
	Client
	DataDir string
	// Log is what the appliance logged, in the binary's format.
	Log *pkgtest.SyncBuffer
	// ran is Run's result, once it returned.
	ran chan error
}

// Option changes an appliance's settings before it is built.
type Option func(*app.Settings)

// ConfigFile runs the appliance with the config file at path.
func ConfigFile(path string) Option { return func(s *app.Settings) { s.ConfigFile = path } }

// Settings is an option that changes the settings by f.
func Settings(f func(*app.Settings)) Option { return Option(f) }

// Serve builds and runs an appliance on a loopback port with dataDir (a
// new temporary one if empty) and its node named NodeName, and returns
// once it is ready (the TSDB open, the config applied, everything
// started). It stops at the test's cleanup; a failed test logs what it
// logged.
func Serve(t testing.TB, dataDir string, opts ...Option) *Appliance {
	t.Helper()
	a, err := Start(t, dataDir, opts...)
	require.NoError(t, err, "start the appliance")
	a.WaitReady()
	return a
}

// Start is Serve without waiting for ready, and with New's error
// returned: for a test of what a bad setting or config gets.
func Start(t testing.TB, dataDir string, opts ...Option) (*Appliance, error) {
	t.Helper()
	if dataDir == "" {
		dataDir = t.TempDir()
	}
	a := &Appliance{DataDir: dataDir, Log: &pkgtest.SyncBuffer{}, ran: make(chan error, 1)}
	s := app.DefaultSettings()
	s.ListenAddress, s.DataDir, s.NodeName = "127.0.0.1:0", dataDir, NodeName
	s.Logger = NewLogger(a.Log)
	for _, o := range opts {
		o(&s)
	}
	var err error
	if a.Appliance, err = app.New(context.Background(), s); err != nil {
		if t.Failed() {
			LogOutput(t, "appliance", a.Log.String())
		}
		return nil, err
	}
	a.Client = Client{T: t, URL: "http://" + a.Addr().String()}
	go func() { a.ran <- a.Run(context.Background()) }()
	t.Cleanup(func() {
		a.Stop()
		if t.Failed() {
			LogOutput(t, "appliance", a.Log.String())
		}
	})
	return a, nil
}

// WaitReady waits until the appliance serves, or fails the test with
// what Run returned if it stopped first.
func (a *Appliance) WaitReady() {
	a.T.Helper()
	select {
	case <-a.Ready():
	case err := <-a.ran:
		a.ran <- err
		a.T.Fatalf("the appliance stopped before it was ready: %v", err)
	}
}

// Wait waits for Run to return (Stop, /-/quit, a component failing) and
// returns its error.
func (a *Appliance) Wait() error {
	err := <-a.ran
	a.ran <- err
	return err
}

// Exited says whether Run has returned, and with what.
func (a *Appliance) Exited() (bool, error) {
	select {
	case err := <-a.ran:
		a.ran <- err
		return true, err
	default:
		return false, nil
	}
}

// AgentConfig is what the test agents run: the appliance scrapes them
// every second, so cAdvisor's housekeeping runs every second too, and two
// simulated GPUs each keep the load down on a small CI machine.
const AgentConfig = `
global:
  scrape_interval: 1s
gpu:
  sim:
    count: 2
`

// Agent is a gpuscope agent running in the test's process.
type Agent struct {
	*app.Agent
	Client
	Log *pkgtest.SyncBuffer
	ran chan error
}

// Wait waits for Run to return and returns its error.
func (a *Agent) Wait() error {
	err := <-a.ran
	a.ran <- err
	return err
}

// ServeAgent builds and runs an agent on a loopback port, named node,
// with the config file at configFile (embedded defaults if empty), and
// returns once it serves.
func ServeAgent(t testing.TB, node, configFile string, f func(*app.AgentSettings)) *Agent {
	t.Helper()
	a := &Agent{Log: &pkgtest.SyncBuffer{}, ran: make(chan error, 1)}
	s := app.AgentSettings{Logger: NewLogger(a.Log), ConfigFile: configFile, NodeName: node, ListenAddress: "127.0.0.1:0"}
	if f != nil {
		f(&s)
	}
	var err error
	a.Agent, err = app.NewAgent(context.Background(), s)
	require.NoError(t, err, "start the agent")
	a.Client = Client{T: t, URL: "http://" + a.Addr().String()}
	go func() { a.ran <- a.Run(context.Background()) }()
	t.Cleanup(func() {
		a.Stop()
		if t.Failed() {
			LogOutput(t, "agent "+node, a.Log.String())
		}
	})
	select {
	case <-a.Ready():
	case err := <-a.ran:
		t.Fatalf("the agent stopped before it was ready: %v", err)
	}
	return a
}

// NewLogger logs to w as the binary logs to its stderr (promslog's
// default format).
func NewLogger(w io.Writer) *slog.Logger { return promslog.New(&promslog.Config{Writer: w}) }

// LogOutput logs what a process printed, for a failed test: its first
// and last lines, a run of lines that differ only in their time= stamp
// (cAdvisor's "closed pipe" warning at each cut scrape) written once with
// its count, and the whole output in a file in the temporary directory.
// CI's record keeps the head and tail of the run's output; whole dumps
// pushed the failing assertions of the tests after the first out of it.
func LogOutput(t testing.TB, what, out string) {
	t.Helper()
	const head, tail = 10, 20
	var lines []string
	var last string
	repeats := 0
	flush := func() {
		if repeats > 0 {
			lines = append(lines, fmt.Sprintf("[the line above %d more times]", repeats))
			repeats = 0
		}
	}
	for _, line := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		msg := timeStamp.ReplaceAllString(line, "")
		if msg == last && len(lines) > 0 {
			repeats++
			continue
		}
		flush()
		lines, last = append(lines, line), msg
	}
	flush()
	program, _, _ := strings.Cut(what, " ")
	file, err := writeTemp(strings.ReplaceAll(t.Name(), "/", "_")+"-"+program+"-*.log", out)
	if err != nil {
		file = fmt.Sprintf("not written: %v", err)
	}
	if len(lines) > head+tail {
		left := fmt.Sprintf("[%d lines left out; the whole output: %s]", len(lines)-head-tail, file)
		lines = append(append(lines[:head:head], left), lines[len(lines)-tail:]...)
	}
	t.Logf("%s output:\n%s", what, strings.Join(lines, "\n"))
}

// writeTemp writes content to a new file named after pattern (as
// os.CreateTemp) in the temporary directory and returns its path.
func writeTemp(pattern, content string) (string, error) {
	f, err := os.CreateTemp("", pattern)
	if err != nil {
		return "", err
	}
	_, err = f.WriteString(content)
	return f.Name(), errors.Join(err, f.Close())
}

// timeStamp is slog's time attribute at the start of a log line.
var timeStamp = regexp.MustCompile(`^time=\S+ `)
