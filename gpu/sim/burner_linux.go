package sim

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// cpuBurner is a busy process in a CPU-limited cgroup, the sim's stand-in
// for the data-loading container that starves an input-bound GPU.
type cpuBurner struct {
	cmd     *exec.Cmd
	created []string // cgroup directories created here, in creation order
	// joined are the directories on its path under a /gpuscope-* cgroup
	// that another gpuscope (a second demo) had created: removed too if
	// that one has stopped first, so that the last one out leaves
	// nothing behind.
	joined []string
	// shared: the container's own cgroup was there already, another
	// gpuscope's burner in it; the two share its CPU limit.
	shared   bool
	done     chan struct{}
	stopOnce sync.Once
	stopErr  error
}

const cfsPeriodUs = 100000

func startCPUBurner(ctx context.Context, o burnerOptions) (*cpuBurner, error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("creating cgroups needs root")
	}
	b := &cpuBurner{}
	join, err := b.prepareCgroups(o)
	if err != nil {
		return nil, errors.Join(err, b.removeCgroups())
	}
	cmd := exec.Command("/bin/sh", "-c", "while :; do :; done")
	// The burner must not outlive gpuscope, even if gpuscope is killed.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, errors.Join(fmt.Errorf("start burner: %w", err), b.removeCgroups())
	}
	b.cmd = cmd
	b.done = make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(b.done)
	}()
	for _, j := range join {
		if err := writeFile(filepath.Join(j.dir, "cgroup.procs"), strconv.Itoa(cmd.Process.Pid)); err != nil && j.required {
			return nil, errors.Join(fmt.Errorf("move burner into %s: %w", j.dir, err), b.stop())
		}
	}
	go func() {
		select {
		case <-ctx.Done():
			_ = cmd.Process.Kill()
		case <-b.done:
		}
	}()
	return b, nil
}

func (b *cpuBurner) pid() int { return b.cmd.Process.Pid }

// sharing says whether another gpuscope's burner was already in the
// container's cgroup (a second demo on the machine).
func (b *cpuBurner) sharing() bool { return b.shared }

// stop kills the burner and removes the cgroups it created. It is
// idempotent.
func (b *cpuBurner) stop() error {
	b.stopOnce.Do(func() {
		if b.cmd != nil {
			_ = b.cmd.Process.Kill()
			<-b.done
		}
		b.stopErr = b.removeCgroups()
	})
	return b.stopErr
}

type cgroupJoin struct {
	dir      string
	required bool
}

// prepareCgroups creates the container's cgroup in every hierarchy cAdvisor
// reads and sets the CPU limit. On cgroup v1 the container lives in one
// directory per hierarchy (cpu and cpuacct are required, memory and pids
// are joined when the machine has them); on v2 it is one directory with
// the cpu controller enabled from the root down.
func (b *cpuBurner) prepareCgroups(o burnerOptions) ([]cgroupJoin, error) {
	quota := int(o.cores * cfsPeriodUs)
	if _, err := os.Stat(filepath.Join(o.root, "cgroup.controllers")); err == nil {
		return b.prepareV2(o, quota)
	}
	var join []cgroupJoin
	seen := map[string]bool{}
	for _, c := range o.controllers {
		h := v1Hierarchy(o.root, c)
		if h == "" {
			if c == "cpu" || c == "cpuacct" {
				return nil, fmt.Errorf("no cgroup v1 %s hierarchy under %s", c, o.root)
			}
			continue
		}
		if seen[h] {
			continue
		}
		seen[h] = true
		dir := filepath.Join(h, o.id)
		if err := b.mkdirs(h, dir); err != nil {
			if c == "cpu" || c == "cpuacct" {
				return nil, err
			}
			o.logger.Debug("Burner cgroup not created in optional hierarchy", "dir", dir, "err", err)
			continue
		}
		if c == "cpu" {
			if err := writeFile(filepath.Join(dir, "cpu.cfs_period_us"), strconv.Itoa(cfsPeriodUs)); err != nil {
				return nil, err
			}
			if err := writeFile(filepath.Join(dir, "cpu.cfs_quota_us"), strconv.Itoa(quota)); err != nil {
				return nil, err
			}
		}
		join = append(join, cgroupJoin{dir: dir, required: c == "cpu" || c == "cpuacct"})
	}
	return join, nil
}

func (b *cpuBurner) prepareV2(o burnerOptions, quota int) ([]cgroupJoin, error) {
	dir := filepath.Join(o.root, o.id)
	// Every ancestor must delegate the cpu controller to its children.
	for p := o.root; p != dir; {
		if err := writeFile(filepath.Join(p, "cgroup.subtree_control"), "+cpu"); err != nil {
			return nil, fmt.Errorf("enable the cpu controller below %s: %w", p, err)
		}
		for _, c := range []string{"+memory", "+pids"} {
			_ = writeFile(filepath.Join(p, "cgroup.subtree_control"), c)
		}
		rel, _ := filepath.Rel(p, dir)
		next := filepath.Join(p, strings.SplitN(rel, string(filepath.Separator), 2)[0])
		if err := b.mkdirs(p, next); err != nil {
			return nil, err
		}
		p = next
	}
	if err := writeFile(filepath.Join(dir, "cpu.max"), fmt.Sprintf("%d %d", quota, cfsPeriodUs)); err != nil {
		return nil, err
	}
	return []cgroupJoin{{dir: dir, required: true}}, nil
}

// v1Hierarchy finds where controller c is mounted, following the
// cpu -> cpu,cpuacct symlinks systemd creates so that a combined
// hierarchy is only used once.
func v1Hierarchy(root, c string) string {
	candidates := map[string][]string{
		"cpu":     {"cpu,cpuacct", "cpu"},
		"cpuacct": {"cpu,cpuacct", "cpuacct"},
	}[c]
	if candidates == nil {
		candidates = []string{c}
	}
	for _, name := range candidates {
		p := filepath.Join(root, name)
		if _, err := os.Stat(filepath.Join(p, "cgroup.procs")); err != nil {
			continue
		}
		if real, err := filepath.EvalSymlinks(p); err == nil {
			return real
		}
		return p
	}
	return ""
}

// mkdirs creates dir and its missing parents below base, remembering which
// it created so that stop removes exactly those.
func (b *cpuBurner) mkdirs(base, dir string) error {
	rel, err := filepath.Rel(base, dir)
	if err != nil {
		return err
	}
	if rel == "." {
		return nil
	}
	leaf := filepath.Clean(dir)
	p := base
	for _, elem := range strings.Split(rel, string(filepath.Separator)) {
		p = filepath.Join(p, elem)
		if err := os.Mkdir(p, 0o755); err == nil {
			b.created = append(b.created, p)
		} else if errors.Is(err, os.ErrExist) {
			// Only gpuscope's own (/gpuscope-demo, ...): an empty
			// /docker of a stopped dockerd is not ours to remove.
			if !strings.HasPrefix(rel, "gpuscope-") {
				continue
			}
			// The container's own cgroup left by a demo that was
			// killed (SIGKILL leaves them): the kernel removes it only
			// while it is empty, and a new one counts CPU from zero,
			// where the leftover would show this run's CPU time and
			// start hours back. (A second demo starting in the instant
			// between another's mkdir and its burner joining would take
			// the cgroup over the same way; both then hold it, and the
			// first to stop finds it busy and says so.)
			if p == leaf && os.Remove(p) == nil {
				if err := os.Mkdir(p, 0o755); err != nil {
					return fmt.Errorf("create cgroup %s in place of a leftover: %w", p, err)
				}
				b.created = append(b.created, p)
				continue
			}
			b.joined = append(b.joined, p)
			b.shared = b.shared || p == leaf
		} else {
			return fmt.Errorf("create cgroup %s: %w", p, err)
		}
	}
	return nil
}

// removeCgroups removes the created directories, deepest first. The
// kernel refuses (EBUSY) while the killed burner is still being reaped,
// so it retries for a moment.
func (b *cpuBurner) removeCgroups() error {
	var errs []error
	for i := len(b.created) - 1; i >= 0; i-- {
		dir := b.created[i]
		var err error
		for try := 0; try < 100; try++ {
			if err = os.Remove(dir); err == nil || errors.Is(err, os.ErrNotExist) {
				err = nil
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("remove cgroup: %w", err))
		}
	}
	b.created = nil
	// Those another process created: gone once it has stopped and none
	// of its processes (nor ours, being reaped) is left; busy while it
	// runs, which is its to clean up then. Deepest first, quietly.
	for i := len(b.joined) - 1; i >= 0; i-- {
		for try := 0; try < 10; try++ {
			if err := os.Remove(b.joined[i]); err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	b.joined = nil
	return errors.Join(errs...)
}

func writeFile(name, value string) error {
	f, err := os.OpenFile(name, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, werr := f.WriteString(value)
	cerr := f.Close()
	if werr != nil {
		return fmt.Errorf("write %q to %s: %w", value, name, werr)
	}
	return cerr
}
