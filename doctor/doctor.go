// Package doctor checks what gpuscope needs from the machine it runs on:
// the NVIDIA driver and its GPUs, privileges and namespaces, cgroups, the
// container runtimes' sockets, the passwd that names users, the data directory, the listen port,
// whether alerts reach anyone, and,
// when a gpuscope is running, whether it sees containers, scrapes its
// targets and agrees on the time with its nodes. `gpuscope doctor` prints
// the checks; the overview page shows them as its Health block.
package doctor

import (
	"context"
	"log/slog"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gpuscope/gpuscope/config"
)

// The statuses of a check.
const (
	// StatusOK: nothing to do.
	StatusOK = "ok"
	// StatusWarn: gpuscope runs, but some metrics are missing or soon will
	// be; the hint says how to get them.
	StatusWarn = "warn"
	// StatusFail: gpuscope cannot run as configured, or has stopped doing
	// part of its job; `gpuscope doctor` exits 1.
	StatusFail = "fail"
)

// Check is the result of one check.
type Check struct {
	// Name identifies the check (nvml, cgroups, docker, data-dir,
	// clock/<node>, scrape/<job>, ...), stable across runs.
	Name string `json:"name"`
	// Status is StatusOK, StatusWarn or StatusFail.
	Status string `json:"status"`
	// Summary is one line saying what was found.
	Summary string `json:"summary"`
	// Hint is one line saying what to do; empty when nothing is.
	Hint string `json:"hint,omitempty"`
	// Pending says the answer waits on what comes within a scrape
	// interval of a start (a first scrape, cAdvisor's first containers),
	// so a Cache asks again soon instead of serving it for a minute.
	Pending bool `json:"-"`
}

// Options are what the checks look at. Only Config is needed; the rest
// have defaults for the machine gpuscope runs on.
type Options struct {
	// Config is the loaded configuration (nil: the embedded default).
	Config *config.Config
	// Logger gets a debug line per check; nil discards.
	Logger *slog.Logger
	// NVML replaces the real libnvidia-ml.so.1, for tests (go-nvml's
	// mock). nil: loaded as the GPU collector loads it.
	NVML nvml.Interface
	// NVIDIADevices are globs of files that show NVIDIA GPUs are present
	// (nil: gpu.DefaultNVIDIADevices).
	NVIDIADevices []string
	// DataDir is the TSDB's directory (default "data/", serve's default).
	DataDir string
	// RetentionSize is the size limit of the TSDB in bytes; 0 means the
	// config's storage.tsdb.retention.size.
	RetentionSize int64
	// ListenAddress is where serve listens (default: the config's
	// web.listen_address).
	ListenAddress string
	// URL is a running gpuscope to ask for its targets and containers,
	// e.g. http://localhost:9089; empty skips those checks.
	URL string
	// Client makes the requests to URL (default: a plain client).
	Client *http.Client
	// Timeout bounds each network check: a runtime's socket, a node, the
	// running gpuscope (default 5 s).
	Timeout time.Duration
	// ProcRoot and CgroupRoot are where /proc and the cgroup filesystems
	// are mounted (default /proc and /sys/fs/cgroup).
	ProcRoot   string
	CgroupRoot string
	// KernelLog is the kernel's log device, where the driver logs every
	// XID (default /dev/kmsg).
	KernelLog string
	// The rest replace the operating system in tests: the effective user
	// id, a PATH lookup and the clock.
	Geteuid  func() int
	LookPath func(file string) (string, error)
	Now      func() time.Time
}

// withDefaults fills in what o leaves empty.
func (o Options) withDefaults() Options {
	if o.Config == nil {
		o.Config = config.Default(o.Logger)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.DataDir == "" {
		o.DataDir = "data/"
	}
	if o.RetentionSize == 0 {
		if s := o.Config.Prometheus.StorageConfig.TSDBConfig; s != nil && s.Retention != nil {
			o.RetentionSize = int64(s.Retention.Size)
		}
	}
	if o.ListenAddress == "" {
		o.ListenAddress = o.Config.Web.ListenAddress
	}
	if o.Client == nil {
		o.Client = &http.Client{}
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Second
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	if o.CgroupRoot == "" {
		o.CgroupRoot = "/sys/fs/cgroup"
	}
	o.CgroupRoot = filepath.Clean(o.CgroupRoot)
	if o.KernelLog == "" {
		o.KernelLog = "/dev/kmsg"
	}
	if o.Geteuid == nil {
		o.Geteuid = os.Geteuid
	}
	if o.LookPath == nil {
		o.LookPath = exec.LookPath
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	o.URL = strings.TrimRight(o.URL, "/")
	return o
}

// group is a set of checks run together; groups run side by side, and
// their checks are listed in the order of groups.
type group func(ctx context.Context, o *Options) []Check

func groups() []group {
	return []group{
		gpuChecks,
		privilegeChecks,
		cgroupChecks,
		runtimeChecks,
		userChecks,
		storageChecks,
		listenChecks,
		alertChecks,
		applianceChecks,
		clockChecks,
	}
}

// Run runs every check and returns them in a fixed order. It never fails:
// a check that cannot look says so in its own result. ctx bounds it all;
// each network check is bounded by Options.Timeout as well.
func Run(ctx context.Context, o Options) []Check {
	o = o.withDefaults()
	gs := groups()
	results := make([][]Check, len(gs))
	var wg sync.WaitGroup
	for i, g := range gs {
		wg.Go(func() { results[i] = g(ctx, &o) })
	}
	wg.Wait()
	var checks []Check
	for _, r := range results {
		checks = append(checks, r...)
	}
	for _, c := range checks {
		o.Logger.Debug("Check done", "check", c.Name, "status", c.Status, "summary", c.Summary)
	}
	return checks
}

// Worst is the most serious status of checks: StatusFail, StatusWarn or
// StatusOK.
func Worst(checks []Check) string {
	worst := StatusOK
	for _, c := range checks {
		switch {
		case c.Status == StatusFail:
			return StatusFail
		case c.Status == StatusWarn:
			worst = StatusWarn
		}
	}
	return worst
}

func ok(name, summary string) Check { return Check{Name: name, Status: StatusOK, Summary: summary} }

func warn(name, summary, hint string) Check {
	return Check{Name: name, Status: StatusWarn, Summary: summary, Hint: hint}
}

func fail(name, summary, hint string) Check {
	return Check{Name: name, Status: StatusFail, Summary: summary, Hint: hint}
}
