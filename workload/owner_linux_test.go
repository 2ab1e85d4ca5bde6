package workload

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestOwnerRealCgroups: owners found from the processes of real cgroups
// the test makes as root, laid out as a rootful Docker container's
// (cgroupfs driver) and as a Slurm job's on the cgroup v2 plugin, whose
// tasks run as uid 1000 and whose slurmstepd and extern sleep run as
// root. The Slurm layout is made in the unified hierarchy, which a hybrid
// machine mounts at /sys/fs/cgroup/unified: the cgroup/v2 plugin needs
// one, whatever the machine runs itself.
func TestOwnerRealCgroups(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("making cgroups and running processes as another user needs root")
	}
	const root = "/sys/fs/cgroup"
	v1, unified := "", ""
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		v1, unified = root, root
	} else {
		for _, h := range []string{"cpu", "cpu,cpuacct"} {
			if _, err := os.Stat(filepath.Join(root, h, "cgroup.procs")); err == nil {
				v1 = filepath.Join(root, h)
				break
			}
		}
		if _, err := os.Stat(filepath.Join(root, "unified", "cgroup.procs")); err == nil {
			unified = filepath.Join(root, "unified")
		}
	}
	if v1 == "" && unified == "" {
		t.Skip("no cgroup hierarchy at " + root)
	}
	base := fmt.Sprintf("/gpuscope-owner-test-%d", os.Getpid())
	passwd := filepath.Join(t.TempDir(), "passwd")
	writeFile(t, passwd, passwdAlice)
	c := NewCache(&Options{Users: NewUsers(UsersOptions{PasswdFile: passwd})})

	t.Run("docker container run with --user 1000", func(t *testing.T) {
		if v1 == "" {
			t.Skip("no cpu hierarchy")
		}
		path := base + "/docker/" + id1
		realCgroup(t, v1, path)
		sleepIn(t, v1, path, 1000)
		sleepIn(t, v1, path, 0) // a later docker exec as root: not the container's init
		require.Equal(t, Identity{Workload: "llama-train", Runtime: "docker", User: "alice"},
			c.Get(path, Metadata{Name: "llama-train", Runtime: "docker"}))
	})

	t.Run("slurm job on the cgroup v2 plugin", func(t *testing.T) {
		if unified == "" {
			t.Skip("no unified hierarchy")
		}
		job := base + "/system.slice/node1_slurmstepd.scope/job_42"
		for _, d := range []string{"/step_extern/slurm", "/step_extern/user/task_special", "/step_0/slurm", "/step_0/user/task_0"} {
			realCgroup(t, unified, job+d)
		}
		sleepIn(t, unified, job+"/step_extern/slurm", 0)
		sleepIn(t, unified, job+"/step_extern/user/task_special", 0)
		sleepIn(t, unified, job+"/step_0/slurm", 0)
		// Slurm starts slurmstepd before it forks the task: the task's
		// pid is the higher, and root's are lower.
		sleepIn(t, unified, job+"/step_0/user/task_0", 1000)
		for path, want := range map[string]Identity{
			job:                         {Workload: "job 42", Runtime: "slurm", SlurmJob: "42", User: "alice"},
			job + "/step_extern":        {Workload: "job 42.extern", Runtime: "slurm", SlurmJob: "42", SlurmStep: "extern", User: "alice"},
			job + "/step_0/slurm":       {Workload: "job 42.0/slurm", Runtime: "slurm", SlurmJob: "42", SlurmStep: "0", User: "alice"},
			job + "/step_0/user/task_0": {Workload: "job 42.0/user/task_0", Runtime: "slurm", SlurmJob: "42", SlurmStep: "0", User: "alice"},
		} {
			require.Equal(t, want, c.Get(path, Metadata{}), path)
		}
	})
}

// realCgroup makes the cgroup at path (and its parents) in the hierarchy
// at root; they are removed, deepest first, when the test ends.
func realCgroup(t *testing.T, root, path string) {
	t.Helper()
	var made []string
	for d := filepath.Join(root, path); d != root; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		made = append(made, d)
	}
	slices.Reverse(made)
	for _, d := range made {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Skipf("the kernel refused a cgroup: %v", err)
		}
	}
	t.Cleanup(func() {
		slices.Reverse(made)
		for _, d := range made {
			for i := 0; i < 50; i++ {
				if err := os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
	})
}

// sleepIn runs a sleep as uid in the cgroup at path of the hierarchy at
// root; it is killed when the test ends.
func sleepIn(t *testing.T, root, path string, uid uint32) {
	t.Helper()
	cmd := exec.Command("sleep", "300")
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}, Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	require.NoError(t, os.WriteFile(filepath.Join(root, path, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644))
}
