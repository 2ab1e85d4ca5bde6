package workload

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults of UsersOptions.
const (
	// DefaultPasswdRefresh is how often Users looks whether passwd changed:
	// a stat, no read, unless it did.
	DefaultPasswdRefresh = 10 * time.Second
	// MaxPasswdBytes bounds the passwd read. `getent passwd` of a
	// directory of 100,000 users is about 10 MB.
	MaxPasswdBytes = 64 << 20
)

// UsersOptions configure Users. Every field has a default for a gpuscope
// that runs on the host, or in a container with the host's root at
// /rootfs (as cAdvisor decides).
type UsersOptions struct {
	// HostRoot is where the host's root filesystem is: "/" on the host;
	// default DefaultHostRoot().
	HostRoot string
	// PasswdFile is the passwd(5) file that names uids; default
	// <HostRoot>/etc/passwd. Directory users (LDAP, SSSD) are not in
	// /etc/passwd: point this at a dump (`getent passwd > file`, kept
	// fresh by cron), since the scrape path never calls NSS.
	PasswdFile string
	// ProcRoot is the host's /proc (default /proc: gpuscope in the host's
	// pid namespace, as the GPU collector needs it too).
	ProcRoot string
	// CgroupRoot is where the cgroup filesystems are mounted (default
	// /sys/fs/cgroup): the unified hierarchy, or v1's per controller.
	CgroupRoot string
	// Refresh is how often passwd is looked at for changes; default
	// DefaultPasswdRefresh, negative never.
	Refresh time.Duration
	Logger  *slog.Logger
	// Now replaces time.Now, for tests.
	Now func() time.Time
}

// DefaultHostRoot is "/rootfs" where /rootfs/proc exists (gpuscope in a
// container given the host's root there, as README's docker run does),
// else "/": cAdvisor's own rule (manager.New), so both read one host.
func DefaultHostRoot() string {
	if _, err := os.Stat("/rootfs/proc"); err == nil {
		return "/rootfs"
	}
	return "/"
}

// PasswdPath is the passwd file UsersOptions o reads.
func (o UsersOptions) PasswdPath() string {
	if o.PasswdFile != "" {
		return o.PasswdFile
	}
	root := o.HostRoot
	if root == "" {
		root = DefaultHostRoot()
	}
	return filepath.Join(root, "etc", "passwd")
}

// Users says whose a workload is: it names uids from the host's passwd
// (read at NewUsers, re-read when the file changes) and finds the owner
// of a cgroup whose path names none from the processes in it. Neither
// calls a socket or NSS: a scrape waits on no directory server.
//
// Bad input costs only names: a passwd that cannot be read leaves uids as
// the user label's values (logged once, and said by gpuscope doctor), a
// malformed line is skipped (logged once per version of the file), a uid
// passwd does not list is shown as the uid. A passwd that becomes
// unreadable after it was read keeps the names last read.
//
// The methods are safe for concurrent use and for a nil *Users, which
// names nothing and finds no owner.
type Users struct {
	passwd  string
	proc    string
	roots   []string // cgroup hierarchies to look for a cgroup in
	refresh time.Duration
	logger  *slog.Logger
	now     func() time.Time

	names     atomic.Pointer[map[uint32]string]
	gen       atomic.Uint64 // counts changes of names
	nextCheck atomic.Int64  // Unix ns of the next stat of passwd

	mu      sync.Mutex // one reload at a time; guards the fields below
	stamp   fileStamp  // of the passwd last read
	failing string     // the read error last logged, "" when the last read worked
}

// fileStamp tells a changed file from the one read.
type fileStamp struct {
	size, mtime int64
	ino         uint64
}

// NewUsers returns Users with passwd read once.
func NewUsers(o UsersOptions) *Users {
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.ProcRoot == "" {
		o.ProcRoot = "/proc"
	}
	if o.CgroupRoot == "" {
		o.CgroupRoot = "/sys/fs/cgroup"
	}
	if o.Refresh == 0 {
		o.Refresh = DefaultPasswdRefresh
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	u := &Users{
		passwd:  o.PasswdPath(),
		proc:    o.ProcRoot,
		roots:   cgroupHierarchies(o.CgroupRoot),
		refresh: o.Refresh,
		logger:  o.Logger,
		now:     o.Now,
	}
	empty := map[uint32]string{}
	u.names.Store(&empty)
	u.mu.Lock()
	u.load()
	u.mu.Unlock()
	u.nextCheck.Store(u.nextCheckAfter(o.Now().UnixNano()))
	return u
}

// PasswdFile is the passwd file u reads.
func (u *Users) PasswdFile() string {
	if u == nil {
		return ""
	}
	return u.passwd
}

// Name returns the user name of uid (decimal) in the host's passwd, else
// uid itself.
func (u *Users) Name(uid string) string {
	if u == nil {
		return uid
	}
	n, err := strconv.ParseUint(uid, 10, 32)
	if err != nil {
		return uid
	}
	if name, ok := (*u.names.Load())[uint32(n)]; ok {
		return name
	}
	return uid
}

// generation counts the changes of the names, first looking whether
// passwd changed when the refresh interval has passed since it last did.
func (u *Users) generation() uint64 {
	if u.refresh > 0 {
		if now := u.now().UnixNano(); now >= u.nextCheck.Load() && u.mu.TryLock() {
			// Another caller holding the lock is reloading: this one
			// goes on with the names there are.
			if now >= u.nextCheck.Load() {
				u.nextCheck.Store(u.nextCheckAfter(now))
				u.load()
			}
			u.mu.Unlock()
		}
	}
	return u.gen.Load()
}

func (u *Users) nextCheckAfter(now int64) int64 {
	if u.refresh < 0 {
		return 1<<63 - 1
	}
	return now + int64(u.refresh)
}

// load reads passwd if it changed since it was last read; u.mu is held.
func (u *Users) load() {
	fi, err := os.Stat(u.passwd)
	if err == nil && u.failing == "" && stampOf(fi) == u.stamp {
		return
	}
	var (
		names map[uint32]string
		bad   []int
		stamp fileStamp
	)
	if err == nil {
		stamp = stampOf(fi)
		names, bad, err = ReadPasswdFile(u.passwd)
	}
	if err != nil {
		if msg := err.Error(); msg != u.failing {
			u.failing = msg
			kept := len(*u.names.Load())
			u.logger.Warn("Cannot read the host's passwd: the user label shows uids (gpuscope doctor says more)",
				"file", u.passwd, "names_kept", kept, "err", err)
		}
		return
	}
	if u.failing != "" {
		u.logger.Info("Read the host's passwd again", "file", u.passwd, "users", len(names))
	}
	u.failing, u.stamp = "", stamp
	if len(bad) > 0 {
		u.logger.Warn("Skipped malformed lines of the host's passwd: their uids show as numbers",
			"file", u.passwd, "lines", len(bad), "first_line", bad[0])
	}
	if !maps.Equal(names, *u.names.Load()) {
		u.names.Store(&names)
		u.gen.Add(1)
	}
}

func stampOf(fi os.FileInfo) fileStamp {
	s := fileStamp{size: fi.Size(), mtime: fi.ModTime().UnixNano()}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		s.ino = uint64(st.Ino)
	}
	return s
}

// ReadPasswdFile reads a passwd(5) file with ParsePasswd, at most
// MaxPasswdBytes of it.
func ReadPasswdFile(path string) (names map[uint32]string, malformed []int, err error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxPasswdBytes+1))
	if err != nil {
		return nil, nil, fmt.Errorf("read %s: %w", path, err)
	}
	if len(b) > MaxPasswdBytes {
		return nil, nil, fmt.Errorf("%s is larger than %d MiB: not a passwd file?", path, MaxPasswdBytes>>20)
	}
	names, malformed = ParsePasswd(b)
	return names, malformed, nil
}

// errNoFields is what ParsePasswd skips a line for.
var errNoFields = errors.New("not name:password:uid:gid:gecos:home:shell")

// ParsePasswd parses passwd(5) content: one user per line,
// name:password:uid:gid:gecos:home:shell. It returns uid → name, the
// first name of a uid winning as for getpwuid(3), and the numbers
// (1-based) of the malformed lines it skipped: not seven fields, an empty
// name, or a uid that is not a number below 2^32. Blank lines, comments
// and NIS compat entries (+, -) are skipped without complaint.
func ParsePasswd(b []byte) (names map[uint32]string, malformed []int) {
	names = map[uint32]string{}
	for n := 1; len(b) > 0; n++ {
		var line []byte
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			line, b = b, nil
		}
		line = bytes.TrimSuffix(line, []byte{'\r'})
		if len(bytes.TrimSpace(line)) == 0 || line[0] == '#' || line[0] == '+' || line[0] == '-' {
			continue
		}
		name, uid, err := passwdEntry(line)
		if err != nil {
			malformed = append(malformed, n)
			continue
		}
		if _, dup := names[uid]; !dup {
			names[uid] = name
		}
	}
	return names, malformed
}

func passwdEntry(line []byte) (string, uint32, error) {
	if bytes.Count(line, []byte{':'}) != 6 {
		return "", 0, errNoFields
	}
	fields := bytes.SplitN(line, []byte{':'}, 4)
	if len(fields[0]) == 0 {
		return "", 0, errNoFields
	}
	uid, err := strconv.ParseUint(string(fields[2]), 10, 32)
	if err != nil {
		return "", 0, errNoFields
	}
	return string(fields[0]), uint32(uid), nil
}
