package cadvisor

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	info "github.com/google/cadvisor/lib/model"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/workload"
)

// TestWorkloadLabels runs the real cAdvisor manager against hand-made
// cgroups laid out as a systemd unit, a user's login session, a Slurm
// (cgroup v1 plugin) step and a plain directory: every series of each carries its workload identity
// beside cAdvisor's own id label, with no label twice. All of them sit
// under one parent of the test's own, so that runs never clash and the
// host's real slices are not touched (the resolvers read the last
// elements of a path, not its root).
func TestWorkloadLabels(t *testing.T) {
	n := time.Now().UnixNano() % 1e6
	parent := fmt.Sprintf("/gpuscope-wl-test-%d", n)
	unit := fmt.Sprintf("gpuscope-test-%d.service", n)
	job := fmt.Sprint(100000 + n)
	service := parent + "/system.slice/" + unit
	step := parent + "/slurm/uid_1000/job_" + job + "/step_0"
	session := parent + "/user.slice/user-1000.slice/session-" + job + ".scope"
	for _, dir := range []string{parent, parent + "/system.slice", service,
		parent + "/slurm", parent + "/slurm/uid_1000", parent + "/slurm/uid_1000/job_" + job, step,
		parent + "/user.slice", parent + "/user.slice/user-1000.slice", session} {
		makeCgroup(t, dir[1:])
	}

	passwd := filepath.Join(t.TempDir(), "passwd")
	require.NoError(t, os.WriteFile(passwd, []byte("alice:x:1000:1000::/home/alice:/bin/sh\n"), 0o644))
	cache := workload.NewCache(&workload.Options{Users: workload.NewUsers(workload.UsersOptions{PasswdFile: passwd})})
	c, err := New(Options{Config: DefaultConfig(), Interval: 200 * time.Millisecond, Workloads: cache})
	require.NoError(t, err)
	runCollector(t, c)

	for _, tc := range []struct {
		id   string
		want map[string]string // the workload labels; any other is absent
	}{
		{service, map[string]string{"workload": unit, "runtime": "systemd"}},
		{step, map[string]string{"workload": "job " + job + ".0", "runtime": "slurm", "slurm_job_id": job, "slurm_step": "0", "slurm_user": "1000", "user": "alice"}},
		{session, map[string]string{"workload": "alice: session-" + job, "runtime": "systemd", "user": "alice"}},
		{parent, map[string]string{"workload": parent, "runtime": "cgroup"}},
		{parent + "/slurm/uid_1000", map[string]string{"workload": "user 1000", "runtime": "slurm", "slurm_user": "1000", "user": "alice"}},
	} {
		t.Run(tc.id, func(t *testing.T) {
			var series []*dto.Metric
			require.Eventually(t, func() bool {
				series, err = allContainerSeries(c, tc.id)
				require.NoError(t, err)
				return len(series) > 0
			}, 20*time.Second, 50*time.Millisecond, "container %s in /metrics/cadvisor", tc.id)
			for _, m := range series {
				got := map[string]string{}
				for _, l := range m.GetLabel() {
					_, dup := got[l.GetName()]
					require.False(t, dup, "label %s twice in %v", l.GetName(), m)
					got[l.GetName()] = l.GetValue()
				}
				require.Equal(t, tc.id, got["id"], "cAdvisor's own id label is kept")
				for _, name := range workload.LabelNames() {
					require.Equal(t, tc.want[name], got[name], "label %s of %v", name, m)
				}
			}
			// The GPU side, which knows only the path, gets the same.
			md, ok := c.Lookup(tc.id)
			require.True(t, ok)
			id := cache.Get(tc.id, md)
			require.Equal(t, tc.want["workload"], id.Workload)
			require.Equal(t, cache.Get(tc.id, workload.Metadata{}), id)
		})
	}
}

// TestWorkloadForgotten: when cAdvisor forgets a container (its cgroup is
// removed), its identity leaves the shared cache, so a cgroup made again
// at the same path is resolved anew.
func TestWorkloadForgotten(t *testing.T) {
	name := fmt.Sprintf("gpuscope-wl-forget-%d", time.Now().UnixNano()%1e6)
	dirs := makeCgroup(t, name)
	id := "/" + name
	resolved := &countingResolver{}
	cache := workload.NewCache(&workload.Options{Resolvers: []workload.Resolver{resolved}})
	c, err := New(Options{Config: DefaultConfig(), Interval: 200 * time.Millisecond, Workloads: cache})
	require.NoError(t, err)
	runCollector(t, c)

	require.Eventually(t, func() bool {
		series, err := allContainerSeries(c, id)
		require.NoError(t, err)
		return len(series) > 0
	}, 20*time.Second, 50*time.Millisecond, "container %s in /metrics/cadvisor", id)
	require.Equal(t, 1, resolved.count(id), "resolved once, then cached")
	_, err = c.Gatherer().Gather()
	require.NoError(t, err)
	require.Equal(t, 1, resolved.count(id), "a second scrape reads the cache")

	for _, d := range dirs {
		require.NoError(t, os.Remove(d))
	}
	require.Eventually(t, func() bool {
		_, known := c.Lookup(id)
		return !known
	}, 20*time.Second, 50*time.Millisecond, "cAdvisor forgets %s", id)
	cache.Get(id, workload.Metadata{})
	require.Equal(t, 2, resolved.count(id), "forgotten with the container: resolved again")
}

// countingResolver recognises nothing and counts the paths it is asked.
type countingResolver struct {
	mu    sync.Mutex
	paths map[string]int
}

func (*countingResolver) Runtime() string { return "counting" }

func (r *countingResolver) Resolve(path string, _ workload.Metadata) (workload.Identity, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.paths == nil {
		r.paths = map[string]int{}
	}
	r.paths[path]++
	return workload.Identity{}, false
}

func (r *countingResolver) count(path string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.paths[path]
}

// TestWorkloadLabelsFromMetadata: the labels func adds the identity that
// the resolvers make of what cAdvisor's runtime handlers report (name,
// image, compose labels, runtime), keeps cAdvisor's own labels, and
// replaces image by the identity's, made safe for a label value.
func TestWorkloadLabelsFromMetadata(t *testing.T) {
	const hex = "3f2a1b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7081"
	ci := &info.ContainerInfo{
		ContainerReference: info.ContainerReference{
			Name:      "/system.slice/docker-" + hex[:64] + ".scope",
			Aliases:   []string{"shop-web-1", hex[:64]},
			Namespace: "docker",
		},
		Spec: info.ContainerSpec{
			Image: "nginx:1.27\n",
			Labels: map[string]string{
				workload.ComposeProjectLabel: "shop",
				workload.ComposeServiceLabel: "web",
				workload.ComposeNumberLabel:  "1",
			},
		},
	}
	cache := workload.NewCache(nil)
	c, err := New(Options{Config: DefaultConfig(), Interval: time.Second, Workloads: cache})
	require.NoError(t, err)
	got := c.labels(ci)
	require.Equal(t, map[string]string{
		"id":              ci.Name,
		"name":            "shop-web-1",
		"image":           "nginx:1.27 ",
		"workload":        "shop/web",
		"runtime":         "docker",
		"compose_project": "shop",
		"compose_service": "web",
	}, got)
	require.Equal(t, 1, cache.Len())

	// With StoreContainerLabels cAdvisor's container_label_* stay too.
	cfg := DefaultConfig()
	cfg.StoreContainerLabels = true
	c, err = New(Options{Config: cfg, Interval: time.Second})
	require.NoError(t, err)
	got = c.labels(ci)
	require.Equal(t, "shop", got["container_label_"+workload.ComposeProjectLabel])
	require.Equal(t, "shop/web", got["workload"])
}

// allContainerSeries are the series of every metric that c exports for
// the container id.
func allContainerSeries(c *Collector, id string) ([]*dto.Metric, error) {
	mfs, err := c.Gatherer().Gather()
	if err != nil {
		return nil, err
	}
	var out []*dto.Metric
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			if labelValue(m, "id") == id {
				out = append(out, m)
			}
		}
	}
	return out, nil
}
