package app_test

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
	"k8s.io/klog/v2"

	"github.com/gpuscope/gpuscope/app"
	"github.com/gpuscope/gpuscope/app/apptest"
	"github.com/gpuscope/gpuscope/packaging/pkgtest"
)

// The tests in this package run the wired appliance and agent in process
// (app.New, Run, Reload, Stop), under the race detector in CI: what the
// e2e package tested through a compiled binary and needs no separate
// process, runtime or neighbour. They keep the e2e tests' assertions and
// helpers' names: a process here is an appliance in this process.

// defaultParallel is how many parallel tests run at once when the command
// line does not say: they wait on scrape and rule intervals more than on
// the CPU, but six at once under the race detector kept two cores busy
// enough that one-second scrapes missed their timeout for seconds on end.
const defaultParallel = "4"

func TestMain(m *testing.M) {
	flag.Parse()
	parallelSet := false
	flag.Visit(func(f *flag.Flag) { parallelSet = parallelSet || f.Name == "test.parallel" })
	if !parallelSet {
		if err := flag.Set("test.parallel", defaultParallel); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	// cAdvisor logs through klog, process-wide, as the binary sets it;
	// its lines are of no test's concern.
	klog.SetSlogLogger(slog.New(slog.DiscardHandler))
	undo, err := apptest.FavourProcess()
	if err != nil {
		fmt.Fprintf(os.Stderr, "the appliances run at the default CPU weight beside the favoured burners: %v\n", err)
	}
	code := m.Run()
	undo()
	os.Exit(code)
}

// process is an appliance or an agent running in this process, with
// e2e's names.
type process struct {
	apptest.Client
	app     *apptest.Appliance // nil for an agent
	agent   *apptest.Agent     // nil for an appliance
	t       *testing.T
	out     *pkgtest.SyncBuffer
	DataDir string
}

// serve runs an appliance with dataDir (a temporary one if empty) and
// returns once it is ready.
func serve(t *testing.T, dataDir string, opts ...apptest.Option) *process {
	t.Helper()
	a := apptest.Serve(t, dataDir, opts...)
	return &process{Client: a.Client, app: a, t: t, out: a.Log, DataDir: a.DataDir}
}

// startAgent runs `gpuscope agent --gpu.backend=sim` as node name with
// the config file cfg, and returns once it serves.
func startAgent(t *testing.T, name, cfg string) *process {
	t.Helper()
	a := apptest.ServeAgent(t, name, cfg, func(s *app.AgentSettings) { s.GPUBackend = "sim" })
	return &process{Client: a.Client, agent: a, t: t, out: a.Log}
}

// stop is SIGTERM: it stops the appliance or agent and returns what its
// Run returned (the binary's exit 0 for nil).
func (p *process) stop() error {
	if p.agent != nil {
		p.agent.Stop()
		return p.agent.Wait()
	}
	p.app.Stop()
	return p.app.Wait()
}

func (p *process) addr() string { return strings.TrimPrefix(p.URL, "http://") }

// configFile, demo and with are serve's settings: --config.file, --demo
// and any other.
func configFile(path string) apptest.Option { return apptest.ConfigFile(path) }

func with(f func(*app.Settings)) apptest.Option { return apptest.Settings(f) }

var demo = with(func(s *app.Settings) { s.Demo = true })

func (p *process) api() promv1.API                        { return p.Client.API() }
func (p *process) instant(q string) (model.Vector, error) { return p.Client.Instant(q) }
func (p *process) queryAt(q string, ts time.Time) (model.Vector, error) {
	return p.Client.QueryAt(q, ts)
}
func (p *process) get(path string) (int, string)        { return p.Client.Get(path) }
func (p *process) post(path, form string) (int, string) { return p.Client.Post(path, form) }

// reload is SIGHUP: the config file read again and applied.
func (p *process) reload() error {
	if p.agent != nil {
		return p.agent.Reload()
	}
	return p.app.Reload()
}

var (
	eventually  = apptest.Eventually
	writeConfig = apptest.WriteConfig
)

// fastConfig scrapes and evaluates every second: for the tests whose
// subject is a scrape or a rule's timing.
const fastConfig = `
global:
  scrape_interval: 1s
  evaluation_interval: 1s
`

// The cgroups tests make, and the CPU weight that lets a burner have its
// CPU on a busy machine.
var (
	newCgroup          = apptest.NewCgroup
	favourCPU          = apptest.FavourCPU
	favourContainerCPU = apptest.FavourContainerCPU
)

const cgroupRoot = apptest.CgroupRoot

// The webhook receiver the alert tests listen with.
type (
	webhook        = apptest.Webhook
	webhookMessage = apptest.WebhookMessage
	webhookAlert   = apptest.WebhookAlert
)

var (
	newWebhook    = apptest.NewWebhook
	passwdFixture = apptest.PasswdFixture
)

// freePort is a loopback port nothing listens on.
func freePort(t *testing.T) int { return pkgtest.FreePort(t) }

// reportRun is the part of /api/v1/workloads' rows these tests read.
type reportRun = apptest.ReportRun

// reportAPI asks p's /api/v1/workloads for the runs between start and end.
func reportAPI(t *testing.T, p *process, start, end time.Time) []reportRun {
	return p.Report(start, end)
}

// rawSamples and scalar read the TSDB of p.
func rawSamples(t *testing.T, p *process, series []string, at time.Time, window time.Duration) map[string][]model.SamplePair {
	return p.RawSamples(series, at, window)
}

func scalar(t *testing.T, p *process, at time.Time, q string) float64 { return p.Scalar(at, q) }

var hostUserName = apptest.HostUserName
