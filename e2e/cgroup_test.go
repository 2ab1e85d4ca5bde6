package e2e

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

const cgroupRoot = "/sys/fs/cgroup"

// testCgroup is a cgroup this test made, in the hierarchies cAdvisor reads
// CPU and memory from (cgroup v1) or in the unified hierarchy (v2).
type testCgroup struct {
	// ID is the container id cAdvisor gives it: its path below the
	// hierarchy root.
	ID   string
	dirs []string
}

// newCgroup creates /<name> or skips the test when the kernel refuses
// (not root, read-only cgroupfs).
func newCgroup(t *testing.T, name string) *testCgroup {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(cgroupRoot, &st); err != nil {
		t.Skipf("no cgroup filesystem at %s: %v", cgroupRoot, err)
	}
	var bases []string
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		bases = []string{cgroupRoot}
	} else {
		for _, c := range []string{"cpu", "cpuacct", "cpu,cpuacct", "memory"} {
			p := filepath.Join(cgroupRoot, c)
			var cst unix.Statfs_t
			if unix.Statfs(p, &cst) == nil && cst.Type == unix.CGROUP_SUPER_MAGIC {
				// cpu and cpuacct may be one hierarchy under two names.
				real, err := filepath.EvalSymlinks(p)
				if err == nil && !slices.Contains(bases, real) {
					bases = append(bases, real)
				}
			}
		}
	}
	if len(bases) == 0 {
		t.Skip("no cpu/cpuacct cgroup hierarchy found")
	}
	cg := &testCgroup{ID: "/" + name}
	for _, b := range bases {
		d := filepath.Join(b, name)
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			cg.remove()
			t.Skipf("kernel refused to create cgroup %s (tests need root): %v", d, err)
		}
		cg.dirs = append(cg.dirs, d)
	}
	t.Cleanup(cg.remove)
	favourCPU(t, cg.dirs...)
	return cg
}

// cpuWeights are the files that give a cgroup ten times the default CPU
// weight: cgroup v1's cpu.shares and v2's cpu.weight.
var cpuWeights = map[string]string{"cpu.shares": "10240", "cpu.weight": "1000"}

// favourCPU gives the cgroups in dirs ten times the default CPU weight
// where the kernel offers one, so that a busy CI machine (other tests
// running in parallel, other builds) does not decide whether a process
// that must burn CPU gets it. Without a weight the test goes on: it only
// runs with less margin.
func favourCPU(t *testing.T, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		for file, v := range cpuWeights {
			p := filepath.Join(d, file)
			if _, err := os.Stat(p); err != nil {
				continue
			}
			if err := os.WriteFile(p, []byte(v), 0o644); err != nil {
				t.Logf("no CPU weight for %s: %v", d, err)
			}
		}
	}
}

// favourContainerCPU is favourCPU for the cgroup of container id that
// gpuscope created (the sim's CPU burner): it waits until the cgroup
// exists in the hierarchy that holds its CPU limit.
func favourContainerCPU(t *testing.T, id string) {
	t.Helper()
	var dirs []string
	eventually(t, 30*time.Second, "cgroup of container "+id+" created", func() error {
		dirs = nil
		for _, h := range []string{"", "cpu", "cpu,cpuacct"} {
			d := filepath.Join(cgroupRoot, h, id)
			for file := range cpuWeights {
				if _, err := os.Stat(filepath.Join(d, file)); err == nil {
					dirs = append(dirs, d)
					break
				}
			}
		}
		if len(dirs) == 0 {
			return fmt.Errorf("no cpu.shares or cpu.weight for %s below %s", id, cgroupRoot)
		}
		return nil
	})
	favourCPU(t, dirs...)
}

// burn starts a busy-loop child in the cgroup and returns it.
func (cg *testCgroup) burn(t *testing.T) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start CPU burner: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	for _, d := range cg.dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			t.Fatalf("move burner into %s: %v", d, err)
		}
	}
	return cmd
}

// remove deletes the cgroup; the kernel refuses while tasks remain, so it
// retries briefly after the burner was killed.
func (cg *testCgroup) remove() {
	for _, d := range cg.dirs {
		for i := 0; i < 50; i++ {
			if err := os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	cg.dirs = nil
}

func (cg *testCgroup) String() string { return fmt.Sprintf("cgroup %s in %v", cg.ID, cg.dirs) }
