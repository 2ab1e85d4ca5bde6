package app_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/app/apptest"
)

// TestSlurmAbsent: on a machine with no Slurm, gpuscope says nothing about
// Slurm and labels no ordinary cgroup as a Slurm job; a cgroup that only
// has the shape of Slurm's v1 layout (uid_<u>/job_<j>/step_<s> under a
// directory of another name) is labelled as the resolver says: the
// layout, not a running Slurm, decides.
func TestSlurmAbsent(t *testing.T) {
	t.Parallel()
	base := fmt.Sprintf("gpuscope-e2e-noslurm-%d", rand.IntN(1e6))
	plain := newCgroup(t, base)
	var step *apptest.Cgroup
	for _, sub := range []string{"/uid_1000", "/uid_1000/job_42", "/uid_1000/job_42/step_0"} {
		step = newCgroup(t, base+sub)
	}
	cfgDir := t.TempDir()
	p := serve(t, "", configFile(writeConfig(t, cfgDir, fastConfig)))

	eventually(t, 30*time.Second, "series of the look-alike and the plain cgroup", func() error {
		// Memory, not CPU: cAdvisor leaves out the CPU counter of a
		// cgroup that has used no CPU, and these hold no process.
		v, err := p.instant(fmt.Sprintf(`container_memory_usage_bytes{id=~%q}`, plain.ID+"|"+step.ID))
		if err != nil {
			return err
		}
		want := map[string]model.Metric{
			plain.ID: {"runtime": "cgroup", "workload": model.LabelValue(plain.ID), "slurm_job_id": "", "slurm_step": "", "slurm_user": "", "user": ""},
			// uid 1000 as this machine's passwd names it, else the number.
			step.ID: {"runtime": "slurm", "workload": "job 42.0", "slurm_job_id": "42", "slurm_step": "0", "slurm_user": "1000", "user": model.LabelValue(hostUserName(t, 1000))},
		}
		if len(v) != len(want) {
			return fmt.Errorf("%d series, want %d: %v", len(v), len(want), v)
		}
		for _, s := range v {
			w := want[string(s.Metric["id"])]
			for k, val := range w {
				if s.Metric[k] != val {
					return fmt.Errorf("%s: %s=%q, want %q", s.Metric["id"], k, s.Metric[k], val)
				}
			}
		}
		return nil
	})

	// No other cgroup on the machine is called a Slurm job: every series
	// with runtime="slurm" or a slurm_* label is the look-alike's or lies
	// under a Slurm CgroupPrepend (TestSlurm's, when it runs alongside).
	ours := `id!~"/` + base + `/.*", id!~"/slurm[^/]*/.*"`
	for _, q := range []string{
		`{runtime="slurm", ` + ours + `}`,
		`{slurm_job_id!="", ` + ours + `}`,
		`{slurm_user!="", ` + ours + `}`,
		`{slurm_step!="", ` + ours + `}`,
	} {
		// Over the test's time, not at the newest scrape, which may have
		// missed its timeout on a busy machine and left nothing to see.
		v, err := p.instant(`last_over_time(` + q + `[10m])`)
		require.NoError(t, err, q)
		require.Empty(t, v, "%s: ordinary cgroups labelled as Slurm's", q)
	}
	// Series exist for ordinary cgroups at all (the queries above would
	// pass on an empty TSDB).
	// Waited for: on a loaded machine cAdvisor's first scrapes can all
	// miss their 1 s timeout.
	eventually(t, time.Minute, "series for ordinary cgroups", func() error {
		v, err := p.instant(`container_memory_usage_bytes{runtime!="slurm"}`)
		if err == nil && len(v) == 0 {
			err = errors.New("no series for ordinary cgroups")
		}
		return err
	})

	// Nothing in the log speaks of Slurm: no lookup of a daemon, a
	// socket or a command that is not there. (The test's own directories
	// carry its name.)
	out := strings.NewReplacer(p.DataDir, "", cfgDir, "").Replace(p.out.String())
	for _, l := range strings.Split(out, "\n") {
		require.NotContains(t, strings.ToLower(l), "slurm", "log line about Slurm on a machine without it")
	}
}

// hostUserName is what gpuscope names uid by default: its name in the
// host's /etc/passwd, else the uid.
