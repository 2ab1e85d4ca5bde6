package doctor

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	config_util "github.com/prometheus/common/config"
	"github.com/prometheus/common/model"

	"github.com/gpuscope/gpuscope/gpu"
)

// Clock skew thresholds between the appliance and a node. node-cadvisor
// keeps cAdvisor's own sample timestamps (honor_timestamps), so a node's
// container series are off by its skew.
const (
	skewWarn = time.Second
	skewFail = 30 * time.Second
)

// applianceChecks ask the running gpuscope at Options.URL for its targets
// and for the containers cAdvisor publishes.
func applianceChecks(ctx context.Context, o *Options) []Check {
	if o.URL == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	var targets struct {
		ActiveTargets []target `json:"activeTargets"`
	}
	if err := apiGet(ctx, o, "/api/v1/targets", url.Values{"state": {"active"}}, &targets); err != nil {
		return []Check{warn("appliance", fmt.Sprintf("no gpuscope answers at %s (%v): the checks of a running gpuscope are skipped", redact(o.URL), err),
			"start `gpuscope serve`, or point --url at it (http://user:password@host:port with basic auth)")}
	}
	checks := []Check{ok("appliance", fmt.Sprintf("gpuscope answers at %s, %d active target%s", redact(o.URL), len(targets.ActiveTargets), plural(len(targets.ActiveTargets))))}
	if c, found := settingsCheck(ctx, o); found {
		checks = append(checks, c)
	}
	if o.Config.Cadvisor.Enabled {
		checks = append(checks, containersCheck(ctx, o))
	}
	if c, found := unnamedUsersCheck(ctx, o); found {
		checks = append(checks, c)
	}
	if c, found := runningKernelLogCheck(ctx, o); found {
		checks = append(checks, c)
	}
	return append(checks, scrapeChecks(targets.ActiveTargets, o.Now())...)
}

// settingsCheck compares what these checks looked at with what the
// running gpuscope uses (its /api/v1/status/flags): a doctor run without
// the flags serve was started with (--demo, --storage.tsdb.path) checks
// another data directory or the host's driver instead of the demo's
// simulated GPUs, and says so here. found is false when the running
// gpuscope does not say.
func settingsCheck(ctx context.Context, o *Options) (c Check, found bool) {
	const name = "settings"
	var flags map[string]string
	if err := apiGet(ctx, o, "/api/v1/status/flags", nil, &flags); err != nil || flags["storage.tsdb.path"] == "" {
		return Check{}, false
	}
	var differ []string
	var hint []string
	if dir := flags["storage.tsdb.path"]; filepath.Clean(dir) != filepath.Clean(o.DataDir) {
		differ = append(differ, fmt.Sprintf("it keeps its data in %s, these checks looked at %s", dir, o.DataDir))
		hint = append(hint, "--storage.tsdb.path="+dir)
	}
	if flags["demo"] == "true" && o.Config.GPU.Backend != gpu.BackendSim {
		differ = append(differ, "it runs the demo's simulated GPUs, these checks looked at this host's driver")
		hint = append(hint, "--demo")
	}
	if len(differ) == 0 {
		return ok(name, "these checks looked at what the running gpuscope uses"), true
	}
	return warn(name, "the running gpuscope was started otherwise: "+strings.Join(differ, "; "),
		"run `gpuscope doctor "+strings.Join(hint, " ")+"` (with serve's --config.file too) to check what it uses"), true
}

// target is one of /api/v1/targets's active targets.
type target struct {
	Labels         map[string]string `json:"labels"`
	ScrapePool     string            `json:"scrapePool"`
	LastError      string            `json:"lastError"`
	LastScrape     time.Time         `json:"lastScrape"`
	Health         string            `json:"health"`
	ScrapeInterval string            `json:"scrapeInterval"`
}

// scrapeChecks: one check per scrape pool (job), saying how long ago its
// targets were last scraped, and which are down or late.
func scrapeChecks(targets []target, now time.Time) []Check {
	pools := map[string][]target{}
	for _, t := range targets {
		pools[t.ScrapePool] = append(pools[t.ScrapePool], t)
	}
	var names []string
	for p := range pools {
		names = append(names, p)
	}
	slices.Sort(names)
	var checks []Check
	for _, p := range names {
		ts := pools[p]
		slices.SortFunc(ts, func(a, b target) int { return cmp.Compare(a.Labels["instance"], b.Labels["instance"]) })
		var down, late, pending []string
		oldest := time.Duration(0)
		for _, t := range ts {
			inst := t.Labels["instance"]
			interval, _ := model.ParseDuration(t.ScrapeInterval)
			if t.LastScrape.IsZero() {
				pending = append(pending, inst)
				continue
			}
			age := max(now.Sub(t.LastScrape), 0)
			oldest = max(oldest, age)
			switch {
			case t.Health == "down":
				down = append(down, fmt.Sprintf("%s down (%s)", inst, t.LastError))
			case interval > 0 && age > 3*time.Duration(interval):
				late = append(late, fmt.Sprintf("%s last scraped %s ago (every %s)", inst, age.Round(time.Second), t.ScrapeInterval))
			}
		}
		name := "scrape/" + p
		switch {
		case len(down) > 0:
			checks = append(checks, warn(name, strings.Join(append(down, late...), "; "),
				"check that the target runs and its address is right; the error above is the scrape's"))
		case len(late) > 0:
			checks = append(checks, warn(name, strings.Join(late, "; "),
				"scrapes are late: gpuscope is overloaded or the target answers slowly (scrape_duration_seconds)"))
		case len(pending) == len(ts):
			c := ok(name, fmt.Sprintf("%d target%s, first scrape pending", len(ts), plural(len(ts))))
			c.Pending = true
			checks = append(checks, c)
		default:
			s := fmt.Sprintf("%d target%s, last scraped %s ago at most", len(ts), plural(len(ts)), oldest.Round(time.Second))
			if len(ts) == 1 {
				s = fmt.Sprintf("%s last scraped %s ago", ts[0].Labels["instance"], oldest.Round(time.Second))
			}
			checks = append(checks, ok(name, s))
		}
	}
	return checks
}

// containersCheck asks how many cgroups and containers cAdvisor publishes
// per node. Seeing only the root cgroup is the mark of a private cgroup
// namespace or a missing /sys mount.
func containersCheck(ctx context.Context, o *Options) Check {
	const name = "containers"
	counts := map[string][3]int{} // instance: all cgroups, below "/", with an image
	for i, q := range []string{
		`count by (instance) (container_start_time_seconds)`,
		`count by (instance) (container_start_time_seconds{id!="/"})`,
		`count by (instance) (container_start_time_seconds{image!=""})`,
	} {
		var res struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		}
		if err := apiGet(ctx, o, "/api/v1/query", url.Values{"query": {q}}, &res); err != nil {
			return warn(name, "cannot ask the running gpuscope for containers: "+err.Error(), "")
		}
		for _, r := range res.Result {
			c := counts[r.Metric["instance"]]
			if s, ok := r.Value[1].(string); ok {
				var v float64
				fmt.Sscan(s, &v)
				c[i] = int(math.Round(v))
			}
			counts[r.Metric["instance"]] = c
		}
	}
	if len(counts) == 0 {
		c := warn(name, "cAdvisor has published no container yet",
			"wait one scrape interval; if it stays so, see the cadvisor scrape and gpuscope's log")
		c.Pending = true
		return c
	}
	var insts, alone, seen []string
	for inst := range counts {
		insts = append(insts, inst)
	}
	slices.Sort(insts)
	for _, inst := range insts {
		c := counts[inst]
		if c[1] == 0 {
			alone = append(alone, inst)
		}
		seen = append(seen, fmt.Sprintf("%s: %d cgroups, %d with an image", inst, c[0], c[2]))
	}
	summary := "cAdvisor sees " + strings.Join(seen, "; ")
	if len(alone) > 0 {
		return warn(name, fmt.Sprintf("%s; on %s only the root cgroup: gpuscope sees only its own container", summary, strings.Join(alone, ", ")),
			"run gpuscope's container with --cgroupns host and /sys mounted (-v /sys:/sys:ro)")
	}
	return ok(name, summary)
}

// runningKernelLogCheck asks the running gpuscope whether each node's GPU
// collector reads XIDs from the kernel log: the service's own user and
// unit decide, not the user running doctor. found is false where no node
// reads NVML.
func runningKernelLogCheck(ctx context.Context, o *Options) (c Check, found bool) {
	const name = "xid-kernel-log/running"
	var res struct {
		Result []struct {
			Metric map[string]string `json:"metric"`
			Value  [2]any            `json:"value"`
		} `json:"result"`
	}
	if err := apiGet(ctx, o, "/api/v1/query", url.Values{"query": {`max by (instance) (gpuscope_gpu_collector_kernel_log_reading)`}}, &res); err != nil {
		return warn(name, "cannot ask the running gpuscope whether it reads the kernel log: "+err.Error(), ""), true
	}
	var reading, not []string
	for _, r := range res.Result {
		if s, _ := r.Value[1].(string); s == "1" {
			reading = append(reading, r.Metric["instance"])
		} else {
			not = append(not, r.Metric["instance"])
		}
	}
	slices.Sort(reading)
	slices.Sort(not)
	switch {
	case len(reading)+len(not) == 0:
		return Check{}, false
	case len(not) > 0:
		return warn(name, fmt.Sprintf("the GPU collector on %s cannot read the kernel log: XIDs NVML does not deliver (79, 119, 120) are missed there", strings.Join(not, ", ")),
			kernelLogHint), true
	}
	return ok(name, fmt.Sprintf("the GPU collector on %s reads XIDs from the kernel log as well as from NVML", strings.Join(reading, ", "))), true
}

// apiGet GETs a Prometheus API path of the running gpuscope and decodes
// its data into v.
func apiGet(ctx context.Context, o *Options, path string, q url.Values, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, o.URL+path+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := o.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			return ue.Err
		}
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", path, resp.Status)
	}
	var envelope struct {
		Status string          `json:"status"`
		Data   json.RawMessage `json:"data"`
		Error  string          `json:"error"`
	}
	if err := json.Unmarshal(body, &envelope); err != nil {
		return fmt.Errorf("%s: not a Prometheus API answer: %w", path, err)
	}
	if envelope.Status != "success" {
		return fmt.Errorf("%s: %s", path, envelope.Error)
	}
	return json.Unmarshal(envelope.Data, v)
}

// redact hides a password in a URL.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return u.Redacted()
}

// clockChecks compare this host's clock with each static node's, from the
// Date header of its agent's /-/healthy.
func clockChecks(ctx context.Context, o *Options) []Check {
	nodes := o.Config.Nodes
	if len(nodes.Static) == 0 {
		return nil
	}
	client, err := config_util.NewClientFromConfig(nodes.HTTPClientConfig, "gpuscope-doctor")
	checks := make([]Check, len(nodes.Static))
	if err != nil {
		for i, nd := range nodes.Static {
			checks[i] = warn("clock/"+nd.Name, "cannot build the nodes' HTTP client: "+err.Error(), "check the nodes: section's TLS and auth settings")
		}
		return checks
	}
	defer client.CloseIdleConnections()
	var wg sync.WaitGroup
	for i, nd := range nodes.Static {
		wg.Go(func() {
			checks[i] = clockCheck(ctx, o, client, nd.Name, nodes.Scheme+"://"+nd.Address+"/-/healthy")
		})
	}
	wg.Wait()
	return checks
}

func clockCheck(ctx context.Context, o *Options, client *http.Client, node, target string) Check {
	name := "clock/" + node
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
	if err != nil {
		return warn(name, fmt.Sprintf("bad node address %s: %v", target, err), "fix the node's address in nodes:")
	}
	t0 := o.Now()
	resp, err := client.Do(req)
	t1 := o.Now()
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err
		}
		return warn(name, fmt.Sprintf("node unreachable at %s: %v; clock not compared", target, err),
			"check that `gpuscope agent` runs there and the address and port are right")
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	resp.Body.Close()
	date, err := http.ParseTime(resp.Header.Get("Date"))
	if err != nil {
		return warn(name, fmt.Sprintf("%s sent no usable Date header; clock not compared", target), "")
	}
	skew, within := estimateSkew(t0, t1, date)
	return skewCheck(name, skew, within)
}

// estimateSkew: the node's clock read date (whole seconds, so its time was
// in [date, date+1s)) while this host's went from t0 to t1. skew is the
// node's clock minus this host's, give or take within.
func estimateSkew(t0, t1, date time.Time) (skew, within time.Duration) {
	rtt := max(t1.Sub(t0), 0)
	mid := t0.Add(rtt / 2)
	return date.Add(500 * time.Millisecond).Sub(mid), 500*time.Millisecond + rtt/2
}

func skewCheck(name string, skew, within time.Duration) Check {
	abs := skew
	if abs < 0 {
		abs = -abs
	}
	least := abs - within // the skew is at least this
	desc := fmt.Sprintf("clock %+.1f s from this host's (± %.1f s)", skew.Seconds(), within.Seconds())
	hint := "sync the clocks (chrony, or `timedatectl set-ntp true`): node-cadvisor keeps the node's own timestamps, so its container series are shifted by the skew"
	switch {
	case least > skewFail:
		return fail(name, desc+": more than "+skewFail.String(), hint)
	case least > skewWarn:
		return warn(name, desc+": more than "+skewWarn.String(), hint)
	}
	return ok(name, desc)
}
