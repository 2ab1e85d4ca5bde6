package apptest

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/gpuscope/gpuscope/workload"
)

// CgroupRoot is where the cgroup filesystems are mounted.
const CgroupRoot = "/sys/fs/cgroup"

// Cgroup is a cgroup this test made, in the hierarchies cAdvisor reads
// CPU and memory from (cgroup v1) or in the unified hierarchy (v2).
type Cgroup struct {
	// ID is the container id cAdvisor gives it: its path below the
	// hierarchy root.
	ID   string
	Dirs []string
}

// NewCgroup creates /<name> or skips the test when the kernel refuses
// (not root, read-only cgroupfs).
func NewCgroup(t testing.TB, name string) *Cgroup {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(CgroupRoot, &st); err != nil {
		t.Skipf("no cgroup filesystem at %s: %v", CgroupRoot, err)
	}
	var bases []string
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		bases = []string{CgroupRoot}
	} else {
		for _, c := range []string{"cpu", "cpuacct", "cpu,cpuacct", "memory"} {
			p := filepath.Join(CgroupRoot, c)
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
	cg := &Cgroup{ID: "/" + name}
	for _, b := range bases {
		d := filepath.Join(b, name)
		if err := os.Mkdir(d, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
			cg.Remove()
			t.Skipf("kernel refused to create cgroup %s (tests need root): %v", d, err)
		}
		cg.Dirs = append(cg.Dirs, d)
	}
	t.Cleanup(cg.Remove)
	FavourCPU(t, cg.Dirs...)
	return cg
}

// CPUWeights are the files that give a cgroup ten times the default CPU
// weight: cgroup v1's cpu.shares and v2's cpu.weight.
var CPUWeights = map[string]string{"cpu.shares": "10240", "cpu.weight": "1000"}

// FavourCPU gives the cgroups in dirs ten times the default CPU weight
// where the kernel offers one, so that a busy CI machine (other tests
// running in parallel, other builds) does not decide whether a process
// that must burn CPU gets it. Without a weight the test goes on: it only
// runs with less margin.
func FavourCPU(t testing.TB, dirs ...string) {
	t.Helper()
	for _, d := range dirs {
		for file, v := range CPUWeights {
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

// FavourContainerCPU is FavourCPU for the cgroup of container id that
// gpuscope created (the sim's CPU burner): it waits until the cgroup
// exists in the hierarchy that holds its CPU limit.
func FavourContainerCPU(t testing.TB, id string) {
	t.Helper()
	var dirs []string
	Eventually(t, 30*time.Second, "cgroup of container "+id+" created", func() error {
		dirs = nil
		for _, h := range []string{"", "cpu", "cpu,cpuacct"} {
			d := filepath.Join(CgroupRoot, h, id)
			for file := range CPUWeights {
				if _, err := os.Stat(filepath.Join(d, file)); err == nil {
					dirs = append(dirs, d)
					break
				}
			}
		}
		if len(dirs) == 0 {
			return fmt.Errorf("no cpu.shares or cpu.weight for %s below %s", id, CgroupRoot)
		}
		return nil
	})
	FavourCPU(t, dirs...)
}

// Burn starts a busy-loop child in the cgroup and returns it.
func (cg *Cgroup) Burn(t testing.TB) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
	if err := cmd.Start(); err != nil {
		t.Fatalf("start CPU burner: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	for _, d := range cg.Dirs {
		if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644); err != nil {
			t.Fatalf("move burner into %s: %v", d, err)
		}
	}
	return cmd
}

// Remove deletes the cgroup; the kernel refuses while tasks remain, so it
// retries briefly after the burner was killed.
func (cg *Cgroup) Remove() {
	for _, d := range cg.Dirs {
		for i := 0; i < 50; i++ {
			if err := os.Remove(d); err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	cg.Dirs = nil
}

func (cg *Cgroup) String() string { return fmt.Sprintf("cgroup %s in %v", cg.ID, cg.Dirs) }

// RunAs starts a command as uid in the cgroup; it is killed when the test
// ends. It returns the process's pid.
func (cg *Cgroup) RunAs(t testing.TB, uid uint32, name string, args ...string) int {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uid, Gid: uid}, Pdeathsig: syscall.SIGKILL}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _, _ = cmd.Process.Wait() })
	for _, d := range cg.Dirs {
		require.NoError(t, os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(strconv.Itoa(cmd.Process.Pid)), 0o644), "move %d into %s", cmd.Process.Pid, d)
	}
	return cmd.Process.Pid
}

// PasswdFixture is a host passwd naming uid 1000 alice, written for the
// test: less invasive than useradd on the machine.
func PasswdFixture(t testing.TB) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "passwd")
	require.NoError(t, os.WriteFile(p, []byte("root:x:0:0:root:/root:/bin/sh\nalice:x:1000:1000:Alice:/home/alice:/bin/sh\n"), 0o644))
	return p
}

// HostUserName is the host passwd's name of uid, or the uid itself.
func HostUserName(t testing.TB, uid uint32) string {
	t.Helper()
	names, _, err := workload.ReadPasswdFile("/etc/passwd")
	require.NoError(t, err)
	if n, ok := names[uid]; ok {
		return n
	}
	return strconv.FormatUint(uint64(uid), 10)
}

// FavourProcess moves this process into a cgroup of its own with the CPU
// weight FavourCPU gives a burner, and returns what moves it back and
// removes the cgroup. The tests that burn CPU in favoured cgroups would
// otherwise take the machine from the appliances running in this
// process (each task of the root group weighs a tenth of such a cgroup),
// which then miss their scrapes and rule evaluations. Where the kernel
// refuses (not root, no cpu controller) it says why and changes nothing.
func FavourProcess() (undo func(), why error) {
	var st unix.Statfs_t
	if err := unix.Statfs(CgroupRoot, &st); err != nil {
		return func() {}, err
	}
	dir, file := filepath.Join(CgroupRoot, "cpu"), "cpu.shares"
	if st.Type == unix.CGROUP2_SUPER_MAGIC {
		dir, file = CgroupRoot, "cpu.weight"
	}
	back := dir
	if own, err := ownCgroupV1("cpu"); err == nil && st.Type != unix.CGROUP2_SUPER_MAGIC {
		back = filepath.Join(dir, own)
	}
	d := filepath.Join(back, fmt.Sprintf("gpuscope-test-%d", os.Getpid()))
	if err := os.Mkdir(d, 0o755); err != nil {
		return func() {}, err
	}
	pid := []byte(strconv.Itoa(os.Getpid()))
	if err := os.WriteFile(filepath.Join(d, file), []byte(CPUWeights[file]), 0o644); err != nil {
		os.Remove(d)
		return func() {}, err
	}
	if err := os.WriteFile(filepath.Join(d, "cgroup.procs"), pid, 0o644); err != nil {
		os.Remove(d)
		return func() {}, err
	}
	return func() {
		_ = os.WriteFile(filepath.Join(back, "cgroup.procs"), pid, 0o644)
		for i := 0; i < 50 && os.Remove(d) != nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
	}, nil
}

// ownCgroupV1 is this process's path in the cgroup v1 hierarchy of
// controller, from /proc/self/cgroup.
func ownCgroupV1(controller string) (string, error) {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(string(b), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) == 3 && slices.Contains(strings.Split(parts[1], ","), controller) {
			return parts[2], nil
		}
	}
	return "", fmt.Errorf("no %s controller in /proc/self/cgroup", controller)
}
