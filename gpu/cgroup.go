package gpu

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// cgroupIDFromProcFile returns the container id cAdvisor gives the cgroup
// that /proc/<pid>/cgroup content b describes. cAdvisor names a container
// by its cgroup path. On cgroup v1 (including hybrid machines, where the
// unified hierarchy only carries systemd's tracking) that is the path in
// the cpu hierarchy, which cAdvisor reads CPU usage from; on a pure v2
// machine it is the path on the "0::" line. A process outside any
// container yields its systemd unit's cgroup or "/", as cAdvisor's raw
// containers do.
func cgroupIDFromProcFile(b []byte) (string, error) {
	var v2 string
	haveV2 := false
	for len(b) > 0 {
		var line []byte
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			line, b = b, nil
		}
		// hierarchy-ID:controller-list:cgroup-path; the path may contain ':'.
		first := bytes.IndexByte(line, ':')
		if first < 0 {
			continue
		}
		second := bytes.IndexByte(line[first+1:], ':')
		if second < 0 {
			continue
		}
		second += first + 1
		controllers, p := line[first+1:second], line[second+1:]
		if len(controllers) == 0 {
			if string(line[:first]) == "0" {
				v2, haveV2 = string(p), true
			}
			continue
		}
		for len(controllers) > 0 {
			var c []byte
			if i := bytes.IndexByte(controllers, ','); i >= 0 {
				c, controllers = controllers[:i], controllers[i+1:]
			} else {
				c, controllers = controllers, nil
			}
			if string(c) == "cpu" {
				return cleanCgroupPath(string(p))
			}
		}
	}
	if haveV2 {
		return cleanCgroupPath(v2)
	}
	return "", errors.New("no cpu controller or unified hierarchy line")
}

// cleanCgroupPath strips what the kernel adds to paths of removed
// cgroups. A cgroup outside gpuscope's cgroup namespace shows as a path
// starting with "/..", relative to gpuscope's own cgroup: the host path,
// which cAdvisor names the container by, cannot be told from it, so it is
// an error rather than a wrong id.
func cleanCgroupPath(p string) (string, error) {
	p = strings.TrimSuffix(p, " (deleted)")
	if p == "/.." || strings.HasPrefix(p, "/../") {
		return "", fmt.Errorf("cgroup %s lies outside gpuscope's cgroup namespace (run gpuscope in the host's, e.g. docker --cgroupns host)", p)
	}
	p = filepath.Clean(p)
	if p == "." || p == "" {
		return "/", nil
	}
	if p[0] != '/' {
		p = "/" + p
	}
	return p, nil
}

// pidResolver maps pids to container ids. A pid's cgroup is read once and
// cached for as long as the pid keeps showing up on a GPU: processes are
// placed in their container's cgroup before they open a GPU and stay
// there, and re-reading /proc for each of hundreds of processes every
// cycle would be most of the cycle's cost. Entries of pids not seen in a
// cycle are dropped. A pid reused between two cycles is caught by the
// process start time (/proc/<pid>/stat field 22), read with the cgroup and
// checked again every few cycles: every cycle for up to 8 cached pids,
// else spread so that about 8 are checked per cycle (32 GPU processes:
// each every 4 cycles). A /proc read costs about as much as the rest of a
// cycle per GPU, so checking all of hundreds of pids every cycle would
// multiply the cycle's cost.
//
// The same reads tell a process that is gone: no /proc/<pid> (it exited)
// or state Z in its stat (it exited and its parent has not reaped it). A
// listed pid found gone is a suspect, checked again every cycle it stays
// listed; one found gone in two consecutive cycles is an orphan
// (orphaned), whose GPU memory the driver holds for nobody. One cycle is
// not enough: a process that exits between the driver's list and the
// /proc read is gone for a moment and unlisted in the next cycle. An
// absent /proc/<pid> counts only while gpuscope sees /proc/1 (init): a
// /proc mounted with hidepid hides other users' processes from a
// non-root gpuscope, which would take them all for gone.
type pidResolver struct {
	procRoot string
	cycle    uint64
	cache    map[uint32]pidEntry
	suspects map[uint32]suspect
	buf      []byte
	path     []byte
	every    uint64 // check each cached pid's start time every this many cycles
	// seesInit is whether procRoot/1 exists, looked up once a cycle when
	// a pid is found absent (0: not yet, 1: yes, 2: no).
	seesInit      uint8
	seesInitCycle uint64
}

type pidEntry struct {
	id    string
	start uint64 // start time in clock ticks since boot; 0 if unreadable
	seen  uint64
	// info is the process's owner and command, read the first time the
	// process list asks (procInfo); nil until then.
	info *procInfo
}

// suspect is a listed pid found gone: since is the first cycle of its
// current streak, seen the last cycle it was found gone.
type suspect struct {
	since, seen uint64
}

// pidState is what /proc says of a listed pid.
type pidState uint8

const (
	pidLive   pidState = iota // a process (or not known to be gone)
	pidGone                   // no /proc/<pid>
	pidZombie                 // state Z: exited, not reaped
)

// startChecksPerCycle is how many cached pids' start times a cycle checks.
const startChecksPerCycle = 8

func newPIDResolver(procRoot string) *pidResolver {
	return &pidResolver{procRoot: procRoot, cache: map[uint32]pidEntry{}, suspects: map[uint32]suspect{}, buf: make([]byte, 4096), every: 1}
}

// beginCycle starts a cycle; endCycle forgets pids not resolved (or found
// gone) since.
func (r *pidResolver) beginCycle() {
	r.cycle++
	r.every = max(uint64((len(r.cache)+startChecksPerCycle-1)/startChecksPerCycle), 1)
}

func (r *pidResolver) endCycle() {
	for pid, e := range r.cache {
		if e.seen != r.cycle {
			delete(r.cache, pid)
		}
	}
	for pid, s := range r.suspects {
		if s.seen != r.cycle {
			delete(r.suspects, pid)
		}
	}
}

// resolve returns the container id of pid. A pid that /proc shows gone
// (pidGone, pidZombie) has no id and is a suspect; orphaned says whether
// it was gone in the previous cycle too.
func (r *pidResolver) resolve(pid uint32) (string, pidState, error) {
	if _, ok := r.suspects[pid]; ok {
		// Found gone before: checked every cycle, never cached.
		if st, _ := r.stat(pid); st != pidLive {
			r.suspect(pid)
			return "", st, errGone
		}
		delete(r.suspects, pid)
	}
	if e, ok := r.cache[pid]; ok {
		if (uint64(pid)+r.cycle)%r.every != 0 {
			e.seen = r.cycle
			r.cache[pid] = e
			return e.id, pidLive, nil
		}
		st, start := r.stat(pid)
		if st != pidLive {
			delete(r.cache, pid)
			r.suspect(pid)
			return "", st, errGone
		}
		if start == e.start {
			e.seen = r.cycle
			r.cache[pid] = e
			return e.id, pidLive, nil
		}
		// Another process now has this pid.
		delete(r.cache, pid)
	}
	st, start := r.stat(pid)
	if st != pidLive {
		r.suspect(pid)
		return "", st, errGone
	}
	b, err := readSmallFile(string(r.procPath(pid, "/cgroup")), r.buf)
	if err != nil {
		return "", pidLive, err
	}
	r.buf = b[:cap(b)]
	id, err := cgroupIDFromProcFile(b)
	if err != nil {
		return "", pidLive, fmt.Errorf("parse %s: %w", r.path, err)
	}
	r.cache[pid] = pidEntry{id: id, start: start, seen: r.cycle}
	return id, pidLive, nil
}

// errGone is resolve's error for a pid /proc shows gone.
var errGone = errors.New("process is gone")

// suspect records that pid was found gone in this cycle.
func (r *pidResolver) suspect(pid uint32) {
	s, ok := r.suspects[pid]
	if !ok || s.seen+1 < r.cycle {
		s.since = r.cycle
	}
	s.seen = r.cycle
	r.suspects[pid] = s
}

// orphaned says whether pid, found gone in this cycle, was found gone in
// the previous cycle too.
func (r *pidResolver) orphaned(pid uint32) bool {
	s, ok := r.suspects[pid]
	return ok && s.seen == r.cycle && s.since < r.cycle
}

// stat reads /proc/<pid>/stat: the process's state and start time (0 if
// unreadable). A pid whose stat cannot be read is gone if /proc/<pid> does
// not exist either, and gpuscope sees init's; else it is taken as live.
func (r *pidResolver) stat(pid uint32) (pidState, uint64) {
	b, err := readSmallFile(string(r.procPath(pid, "/stat")), r.buf)
	if err != nil {
		if r.absent(pid) {
			return pidGone, 0
		}
		return pidLive, 0
	}
	r.buf = b[:cap(b)]
	if statState(b) == 'Z' {
		return pidZombie, 0
	}
	return pidLive, statStartTime(b)
}

// absent says whether procRoot/<pid> does not exist while procRoot/1 does.
func (r *pidResolver) absent(pid uint32) bool {
	if _, err := os.Stat(string(r.procPath(pid, ""))); !errors.Is(err, fs.ErrNotExist) {
		return false
	}
	if r.seesInitCycle != r.cycle || r.seesInit == 0 {
		r.seesInit, r.seesInitCycle = 2, r.cycle
		if _, err := os.Stat(string(r.procPath(1, ""))); err == nil {
			r.seesInit = 1
		}
	}
	return r.seesInit == 1
}

func (r *pidResolver) procPath(pid uint32, file string) []byte {
	r.path = append(r.path[:0], r.procRoot...)
	r.path = append(r.path, '/')
	r.path = strconv.AppendUint(r.path, uint64(pid), 10)
	r.path = append(r.path, file...)
	return r.path
}

// statState returns field 3 (state) of /proc/<pid>/stat content: R, S,
// D, Z, ...; 0 if it cannot be parsed.
func statState(b []byte) byte {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	rest := bytes.TrimLeft(b[i+1:], " ")
	if len(rest) == 0 {
		return 0
	}
	return rest[0]
}

// statStartTime parses field 22 (starttime) of /proc/<pid>/stat content.
// Field 2, the command name in parentheses, may contain spaces and
// parentheses, so fields are counted from the last ')'.
func statStartTime(b []byte) uint64 {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0
	}
	// After ") " come fields 3 (state), 4, ...: field 22 is the 20th.
	rest := b[i+1:]
	for n := 0; n < 20; n++ {
		rest = bytes.TrimLeft(rest, " ")
		j := bytes.IndexByte(rest, ' ')
		if j < 0 {
			j = len(rest)
		}
		if n == 19 {
			v, err := strconv.ParseUint(string(bytes.TrimSpace(rest[:j])), 10, 64)
			if err != nil {
				return 0
			}
			return v
		}
		rest = rest[j:]
	}
	return 0
}

// readSmallFile reads a procfs file into buf, growing it if needed.
// procfs files report size 0, so os.ReadFile would start small anyway.
func readSmallFile(name string, buf []byte) ([]byte, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	n := 0
	for {
		if n == len(buf) {
			buf = append(buf, make([]byte, len(buf)+512)...)
		}
		m, err := f.Read(buf[n:])
		n += m
		if errors.Is(err, io.EOF) || (err == nil && m == 0) {
			return buf[:n], nil
		}
		if err != nil {
			return nil, err
		}
	}
}
