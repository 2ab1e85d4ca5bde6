//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/model"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gpuscope/gpuscope/app/apptest"
	"github.com/gpuscope/gpuscope/packaging/pkgtest"
)

// slurmNode is the node name of the test's slurmd. Debian builds Slurm
// with multiple-slurmd support, so the cgroup v1 plugin's CgroupPrepend is
// "/slurm_%n": the job cgroups lie under /slurm_gpuscope-e2e, a name no
// Slurm on the machine uses.
const slurmNode = "gpuscope-e2e"

// TestSlurm runs a one-node Slurm (munged, slurmctld and slurmd started
// here, proctrack/cgroup and task/cgroup on the cgroup v1 plugin) and an
// srun CPU job submitted by user nobody: the job's cAdvisor series carry
// runtime="slurm", its job id, step, slurm_user (the uid, as before) and
// user (nobody, the host passwd's name of the uid) and the workload
// "job <id>.<step>", and go stale when the job ends. The cgroup v2
// plugin's layout, whose paths carry no uid, is workload's
// TestOwnerRealCgroups: this machine's Slurm (22.05) runs the v2 plugin
// only on a unified hierarchy with its controllers, under systemd.
func TestSlurm(t *testing.T) {
	pkgtest.Require(t, true, "munged", "slurmctld", "slurmd", "srun", "sinfo", "scancel")
	t.Parallel()
	var st unix.Statfs_t
	require.NoError(t, unix.Statfs(cgroupRoot, &st), "statfs %s", cgroupRoot)
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		t.Skipf("%s is a cgroup v2 hierarchy only; this test configures Slurm's cgroup/v1 plugin", cgroupRoot)
	}

	s := startSlurm(t)
	p := serve(t, "", "--config.file="+writeConfig(t, t.TempDir(), fastConfig))
	s.waitIdle(t)

	// The job prints Slurm's own idea of its id, then burns a CPU until
	// the test creates the stop file, and ends by itself.
	stop := filepath.Join(s.dir, "stop")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	srun := exec.CommandContext(ctx, "srun", "--job-name=gpuscope-e2e", "-N1", "-n1", "sh", "-c",
		`echo "$SLURM_JOB_ID $SLURM_STEP_ID"; yes >/dev/null & y=$!; while [ ! -e `+stop+` ]; do sleep 0.2; done; kill $y`)
	srun.Env = append(os.Environ(), "SLURM_CONF="+s.conf)
	// Submitted by nobody, so that the job's user is not gpuscope's.
	srun.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Credential: &syscall.Credential{Uid: slurmJobUID, Gid: slurmJobUID}}
	srun.Dir = s.dir
	stdout, err := srun.StdoutPipe()
	require.NoError(t, err)
	srunOut := &pkgtest.SyncBuffer{}
	srun.Stderr = srunOut
	require.NoError(t, srun.Start())
	// srunDone is closed when srun has exited, with srunErr its error.
	srunDone := make(chan struct{})
	var srunErr error
	go func() { srunErr = srun.Wait(); close(srunDone) }()
	t.Cleanup(func() {
		_ = os.WriteFile(stop, nil, 0o644)
		select {
		case <-srunDone:
		case <-time.After(30 * time.Second):
			_ = srun.Process.Kill()
		}
	})

	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "first line of the job's output; srun's stderr:\n%s", srunOut)
	job, step, ok := strings.Cut(strings.TrimSpace(line), " ")
	require.True(t, ok && job != "" && step != "", "job printed %q, not its job and step id", line)
	t.Cleanup(func() {
		_, _, _ = pkgtest.Cmd{Env: []string{"SLURM_CONF=" + s.conf}, Timeout: 30 * time.Second}.Output("scancel", job)
	})
	uid := strconv.Itoa(slurmJobUID)

	// Slurm's v1 layout: <CgroupPrepend>/uid_<uid>/job_<job>/step_<step>,
	// with task_<n> below for jobacct_gather/cgroup (cpuacct, memory).
	byID := func(v model.Vector) map[string]model.Metric {
		m := map[string]model.Metric{}
		for _, s := range v {
			m[string(s.Metric["id"])] = s.Metric
		}
		return m
	}
	jobQuery := fmt.Sprintf(`container_cpu_usage_seconds_total{slurm_job_id=%q}`, job)
	eventually(t, 30*time.Second, "the job's CPU series with its Slurm labels", func() error {
		v, err := p.instant(jobQuery)
		if err != nil {
			return err
		}
		want := map[string]model.Metric{
			"/uid_" + uid + "/job_" + job:                               {"workload": model.LabelValue("job " + job), "slurm_step": ""},
			"/uid_" + uid + "/job_" + job + "/step_" + step:             {"workload": model.LabelValue("job " + job + "." + step), "slurm_step": model.LabelValue(step)},
			"/uid_" + uid + "/job_" + job + "/step_" + step + "/task_0": {"workload": model.LabelValue("job " + job + "." + step + "/task_0"), "slurm_step": model.LabelValue(step)},
		}
		got := byID(v)
		for suffix, w := range want {
			id := "/slurm_" + slurmNode + suffix
			m, ok := got[id]
			if !ok {
				return fmt.Errorf("no series for cgroup %s among %d: %v", id, len(v), v)
			}
			w["runtime"], w["slurm_job_id"], w["slurm_user"], w["user"] = "slurm", model.LabelValue(job), model.LabelValue(uid), model.LabelValue(hostUserName(t, slurmJobUID))
			for k, val := range w {
				if m[k] != val {
					return fmt.Errorf("%s: %s=%q, want %q (%v)", id, k, m[k], val, m)
				}
			}
		}
		return nil
	})
	// The step's cgroup holds the burner: its CPU counter grows.
	stepQuery := fmt.Sprintf(`container_cpu_usage_seconds_total{slurm_job_id=%q, slurm_step=%q, workload=%q}`, job, step, "job "+job+"."+step)
	eventually(t, 30*time.Second, "the step's CPU time above 0.5 s", func() error {
		v, err := p.instant(stepQuery)
		if err != nil {
			return err
		}
		if len(v) != 1 || v[0].Value < 0.5 {
			return fmt.Errorf("%s: %v", stepQuery, v)
		}
		return nil
	})

	// The job ends by itself; slurmstepd removes its cgroups, and every
	// cAdvisor series (container_*) of the job goes stale; those the
	// rules record over 1- and 5-minute windows keep its labels until
	// their windows have passed.
	require.NoError(t, os.WriteFile(stop, nil, 0o644))
	select {
	case <-srunDone:
		require.NoError(t, srunErr, "srun; stderr:\n%s", srunOut)
	case <-time.After(60 * time.Second):
		t.Fatalf("srun did not end within 60 s of the stop file; stderr:\n%s", srunOut)
	}
	allQuery := fmt.Sprintf(`{__name__=~"container_.*", slurm_job_id=%q}`, job)
	eventually(t, 30*time.Second, "the ended job's series stale", func() error {
		v, err := p.instant(allQuery)
		if err != nil {
			return err
		}
		if len(v) != 0 {
			return fmt.Errorf("%d series still at now, e.g. %v", len(v), v[0].Metric)
		}
		return nil
	})
}

// hostUserName is the host passwd's name of uid (apptest's).
var hostUserName = apptest.HostUserName

// slurmJobUID is the user TestSlurm's job runs as: nobody, whom Debian's
// /etc/passwd names so (base-passwd), the passwd gpuscope reads by default.
const slurmJobUID = 65534

// slurm is a one-node Slurm cluster the test started.
type slurm struct {
	dir  string // temporary directory: keys, sockets, state, spool
	conf string // slurm.conf, for SLURM_CONF
	logs map[string]*pkgtest.SyncBuffer
}

// startSlurm starts munged, slurmctld and slurmd with their state in a
// private directory; all stop at cleanup, and the cgroups Slurm created
// and left (its empty CgroupPrepend directories) are removed.
func startSlurm(t *testing.T) *slurm {
	t.Helper()
	// munged wants every directory above its socket searchable by all,
	// which t.TempDir's 0700 directories are not.
	dir, err := os.MkdirTemp("", "gpuscope-slurm")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	require.NoError(t, os.Chmod(dir, 0o755))
	s := &slurm{dir: dir, conf: filepath.Join(dir, "slurm.conf"), logs: map[string]*pkgtest.SyncBuffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			for name, l := range s.logs {
				t.Logf("%s output:\n%s", name, l)
			}
		}
	})
	removeNewSlurmCgroups(t)

	key := filepath.Join(dir, "munge.key")
	b := make([]byte, 1024)
	for i := range b {
		b[i] = byte(rand.Uint32())
	}
	require.NoError(t, os.WriteFile(key, b, 0o400))
	sock := filepath.Join(dir, "munge.sock")
	s.daemon(t, "munged", "-F", "--socket="+sock, "--key-file="+key,
		"--pid-file="+filepath.Join(dir, "munged.pid"), "--seed-file="+filepath.Join(dir, "munged.seed"))
	eventually(t, 10*time.Second, "munged's socket", func() error {
		_, err := os.Stat(sock)
		return err
	})

	host, err := os.Hostname()
	require.NoError(t, err)
	host, _, _ = strings.Cut(host, ".")
	for _, d := range []string{"state", "spool"} {
		require.NoError(t, os.Mkdir(filepath.Join(dir, d), 0o755))
	}
	conf := fmt.Sprintf(`ClusterName=gpuscope-e2e
SlurmctldHost=%[1]s(127.0.0.1)
SlurmctldPort=%[2]d
SlurmdPort=%[3]d
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=%[4]s
CredType=cred/munge
StateSaveLocation=%[5]s/state
SlurmdSpoolDir=%[5]s/spool
SlurmctldPidFile=%[5]s/slurmctld.pid
SlurmdPidFile=%[5]s/slurmd.pid
ProctrackType=proctrack/cgroup
TaskPlugin=task/cgroup
JobAcctGatherType=jobacct_gather/cgroup
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
NodeName=%[6]s NodeAddr=127.0.0.1 CPUs=%[7]d State=UNKNOWN
PartitionName=e2e Nodes=%[6]s Default=YES MaxTime=10 State=UP
`, host, freePort(t), freePort(t), sock, dir, slurmNode, numCPU(t))
	require.NoError(t, os.WriteFile(s.conf, []byte(conf), 0o644))
	// Slurm reads cgroup.conf from slurm.conf's directory.
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cgroup.conf"), []byte(`CgroupPlugin=cgroup/v1
CgroupMountpoint=/sys/fs/cgroup
CgroupAutomount=no
ConstrainCores=yes
ConstrainRAMSpace=yes
`), 0o644))
	s.daemon(t, "slurmctld", "-D", "-f", s.conf)
	s.daemon(t, "slurmd", "-D", "-N", slurmNode, "-f", s.conf)
	return s
}

// numCPU is the number of CPUs slurmd will find (the node's CPUs= must
// not exceed it, or slurmctld drains the node).
func numCPU(t *testing.T) int {
	t.Helper()
	var set unix.CPUSet
	require.NoError(t, unix.SchedGetaffinity(0, &set))
	return set.Count()
}

// daemon starts a daemon in the foreground; it gets SIGTERM at cleanup
// (SIGKILL if it has not ended 20 s later), and SIGKILL if the test
// binary dies first.
func (s *slurm) daemon(t *testing.T, name string, args ...string) {
	t.Helper()
	out := &pkgtest.SyncBuffer{}
	s.logs[name] = out
	cmd := exec.Command(name, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), "SLURM_CONF="+s.conf)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start(), name)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
}

// waitIdle waits until slurmd has registered and the node takes jobs.
func (s *slurm) waitIdle(t *testing.T) {
	t.Helper()
	eventually(t, 60*time.Second, "Slurm node "+slurmNode+" idle", func() error {
		out, errOut, err := pkgtest.Cmd{Env: []string{"SLURM_CONF=" + s.conf}, Timeout: 10 * time.Second}.
			Output("sinfo", "-h", "-n", slurmNode, "-o", "%t")
		if err != nil {
			return fmt.Errorf("sinfo: %w: %s", err, errOut)
		}
		if state := strings.TrimSpace(out); state != "idle" {
			return fmt.Errorf("node state %q", state)
		}
		return nil
	})
}

// removeNewSlurmCgroups removes, at cleanup, the cgroups named slurm* at
// the top of a hierarchy that did not exist when it was called, bottom-up:
// Slurm's v1 plugin leaves its empty CgroupPrepend directory behind.
func removeNewSlurmCgroups(t *testing.T) {
	t.Helper()
	before := existingCgroups("slurm*")
	t.Cleanup(func() {
		for _, top := range existingCgroups("slurm*") {
			if !slices.Contains(before, top) {
				removeEmptyCgroups(t, top)
			}
		}
	})
}
