package workload

import (
	"bytes"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestParsePasswd(t *testing.T) {
	for _, tc := range []struct {
		name      string
		in        string
		want      map[uint32]string
		malformed []int
	}{
		{
			name: "users",
			in:   "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000:Alice,,,:/home/alice:/bin/bash\nbob:*:1001:100::/home/bob:\n",
			want: map[uint32]string{0: "root", 1000: "alice", 1001: "bob"},
		},
		{
			name: "no newline at the end, CRLF line ends",
			in:   "alice:x:1000:1000::/home/alice:/bin/sh\r\nbob:x:1001:1001::/home/bob:/bin/sh",
			want: map[uint32]string{1000: "alice", 1001: "bob"},
		},
		{
			name: "blank lines, comments and NIS compat entries are no users and no mistakes",
			in:   "\n# local users\n   \n+@admins::::::\n-mallory::::::\n+\nalice:x:1000:1000::/home/alice:/bin/sh\n",
			want: map[uint32]string{1000: "alice"},
		},
		{
			name: "the first name of a uid wins, as for getpwuid",
			in:   "alice:x:1000:1000::/home/alice:/bin/sh\nalias:x:1000:1000::/home/alice:/bin/sh\n",
			want: map[uint32]string{1000: "alice"},
		},
		{
			name:      "malformed lines are skipped and counted, the others kept",
			in:        "alice:x:1000:1000::/home/alice:/bin/sh\nshort:x:1002\n:x:1003:1003::/:/bin/sh\nneg:x:-1:0::/:/bin/sh\nbig:x:4294967296:0::/:/bin/sh\nword:x:abc:0::/:/bin/sh\nextra:x:1004:0::/:/bin/sh:more\nbob:x:1001:1001::/home/bob:/bin/sh\n",
			want:      map[uint32]string{1000: "alice", 1001: "bob"},
			malformed: []int{2, 3, 4, 5, 6, 7},
		},
		{
			name: "the largest uid",
			in:   "nobody4:x:4294967295:0::/:/bin/sh\n",
			want: map[uint32]string{4294967295: "nobody4"},
		},
		{
			name:      "binary garbage",
			in:        "\x00\xff\xfe:::\n\x01",
			want:      map[uint32]string{},
			malformed: []int{1, 2},
		},
		{name: "empty", in: "", want: map[uint32]string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			names, malformed := ParsePasswd([]byte(tc.in))
			require.Equal(t, tc.want, names)
			require.Equal(t, tc.malformed, malformed)
		})
	}
}

func TestStatusUID(t *testing.T) {
	for _, tc := range []struct {
		name, in, want string
		ok             bool
	}{
		{"real uid first", "Name:\tpython\nUmask:\t0022\nState:\tS (sleeping)\nUid:\t1000\t0\t0\t0\nGid:\t100\t100\t100\t100\n", "1000", true},
		{"root", "Uid:\t0\t0\t0\t0\n", "0", true},
		{"no Uid line", "Name:\tx\nGid:\t0\t0\t0\t0\n", "", false},
		{"empty Uid line", "Uid:\n", "", false},
		{"not a number", "Uid:\tabc\t0\t0\t0\n", "", false},
		{"past 32 bits", "Uid:\t4294967296\t0\t0\t0\n", "", false},
		{"a name that looks like the line does not count", "Name:\tUid:\t7\nUid:\t42\t42\t42\t42", "42", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := StatusUID([]byte(tc.in))
			require.Equal(t, tc.ok, ok)
			require.Equal(t, tc.want, got)
		})
	}
}

// logBuffer is a slog handler's output, safe for concurrent writes.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) lines() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := strings.TrimSpace(l.b.String())
	if s == "" {
		return nil
	}
	return strings.Split(s, "\n")
}

// fakeClock is a clock a test moves.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// writeFile writes content to path with a modification time after the
// one it had, so that a rewrite within the file system's time resolution
// still reads as a change.
func writeFile(t *testing.T, path, content string) {
	t.Helper()
	var before time.Time
	if fi, err := os.Stat(path); err == nil {
		before = fi.ModTime()
	}
	require.NoError(t, os.WriteFile(path, []byte(content), 0o644))
	fi, err := os.Stat(path)
	require.NoError(t, err)
	if !fi.ModTime().After(before) {
		next := before.Add(time.Second)
		require.NoError(t, os.Chtimes(path, next, next))
	}
}

const passwdAlice = "root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/bash\n"

func TestUsersName(t *testing.T) {
	passwd := filepath.Join(t.TempDir(), "passwd")
	writeFile(t, passwd, passwdAlice)
	u := NewUsers(UsersOptions{PasswdFile: passwd})
	for uid, want := range map[string]string{
		"1000": "alice", "0": "root",
		"1001":       "1001",       // not in passwd: the uid
		"4294967296": "4294967296", // no uid: as given
		"alice":      "alice",
		"":           "",
	} {
		require.Equal(t, want, u.Name(uid), "uid %q", uid)
	}
	var none *Users
	require.Equal(t, "1000", none.Name("1000"), "nil Users names nothing")
	require.Equal(t, passwd, u.PasswdFile())
}

func TestUsersPasswdPath(t *testing.T) {
	require.Equal(t, "/x/passwd", UsersOptions{HostRoot: "/rootfs", PasswdFile: "/x/passwd"}.PasswdPath(), "the file wins")
	require.Equal(t, "/rootfs/etc/passwd", UsersOptions{HostRoot: "/rootfs"}.PasswdPath())
	require.Equal(t, filepath.Join(DefaultHostRoot(), "etc/passwd"), UsersOptions{}.PasswdPath())
}

// TestUsersBadPasswd: a passwd that cannot be read gives uids and one log
// line however often it is looked at; it is read once it can be; one
// that becomes unreadable keeps the names read; malformed lines are
// logged once per version of the file, and cost only their own users.
func TestUsersBadPasswd(t *testing.T) {
	dir := t.TempDir()
	passwd := filepath.Join(dir, "passwd")
	clock := newFakeClock()
	logs := &logBuffer{}
	u := NewUsers(UsersOptions{PasswdFile: passwd, Now: clock.Now, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	c := NewCache(&Options{Users: u})
	session := "/user.slice/user-1000.slice/session-3.scope"

	require.Equal(t, Identity{Workload: "1000: session-3", Runtime: "systemd", User: "1000"}, c.Get(session, Metadata{}))
	for range 3 {
		clock.Add(DefaultPasswdRefresh)
		c.Get(session, Metadata{})
	}
	require.Len(t, logs.lines(), 1, "one line for a passwd that cannot be read: %v", logs.lines())
	require.Contains(t, logs.lines()[0], "level=WARN")
	require.Contains(t, logs.lines()[0], "Cannot read the host's passwd")
	require.Contains(t, logs.lines()[0], "no such file or directory")

	// It appears: read at the next look, and the cached identity renamed.
	writeFile(t, passwd, passwdAlice)
	require.Equal(t, "1000: session-3", c.Get(session, Metadata{}).Workload, "not looked at before the refresh interval")
	clock.Add(DefaultPasswdRefresh)
	require.Equal(t, Identity{Workload: "alice: session-3", Runtime: "systemd", User: "alice"}, c.Get(session, Metadata{}))
	require.Len(t, logs.lines(), 2)
	require.Contains(t, logs.lines()[1], "Read the host's passwd again")

	// It goes: the names read are kept, and that is said once.
	require.NoError(t, os.Remove(passwd))
	for range 3 {
		clock.Add(DefaultPasswdRefresh)
		require.Equal(t, "alice", c.Get(session, Metadata{}).User)
	}
	require.Len(t, logs.lines(), 3)
	require.Contains(t, logs.lines()[2], "names_kept=2")

	// Malformed lines: skipped, logged once per version, the rest read.
	writeFile(t, passwd, "alice:x:1000:1000::/home/alice:/bin/bash\nbroken line\nbob:x:notanumber:1::/:/bin/sh\ncarol:x:1002:1002::/home/carol:/bin/sh\n")
	for range 3 {
		clock.Add(DefaultPasswdRefresh)
		c.Get(session, Metadata{})
	}
	require.Len(t, logs.lines(), 5, "%v", logs.lines())
	require.Contains(t, logs.lines()[3], "Read the host's passwd again")
	require.Contains(t, logs.lines()[4], "Skipped malformed lines")
	require.Contains(t, logs.lines()[4], "lines=2 first_line=2")
	require.Equal(t, "carol", u.Name("1002"))
	require.Equal(t, "0", u.Name("0"), "root's line is gone from this version")
}

// TestUsersReread: a changed passwd is read at the next look after the
// refresh interval, an unchanged one is not read again, and only the
// identities whose user it renames change.
func TestUsersReread(t *testing.T) {
	passwd := filepath.Join(t.TempDir(), "passwd")
	writeFile(t, passwd, passwdAlice)
	clock := newFakeClock()
	u := NewUsers(UsersOptions{PasswdFile: passwd, Now: clock.Now})
	c := NewCache(&Options{Users: u})
	session := "/user.slice/user-1000.slice/session-3.scope"
	require.Equal(t, "alice: session-3", c.Get(session, Metadata{}).Workload)
	gen := u.generation()

	clock.Add(DefaultPasswdRefresh)
	require.Equal(t, gen, u.generation(), "unchanged file: same names")

	writeFile(t, passwd, "alicia:x:1000:1000::/home/alice:/bin/bash\n")
	clock.Add(DefaultPasswdRefresh - time.Nanosecond)
	require.Equal(t, "alice: session-3", c.Get(session, Metadata{}).Workload, "not looked at yet")
	clock.Add(time.Nanosecond)
	require.Equal(t, Identity{Workload: "alicia: session-3", Runtime: "systemd", User: "alicia"}, c.Get(session, Metadata{}))
	require.Equal(t, gen+1, u.generation())

	// The same names in a rewritten file change nothing.
	writeFile(t, passwd, "alicia:x:1000:1000::/home/alice:/bin/bash\n")
	clock.Add(DefaultPasswdRefresh)
	require.Equal(t, gen+1, u.generation())

	never := NewUsers(UsersOptions{PasswdFile: passwd, Now: clock.Now, Refresh: -1})
	writeFile(t, passwd, passwdAlice)
	clock.Add(time.Hour)
	require.Equal(t, "alicia", never.Name("1000"), "a negative refresh never reads again")
}

// fakeHost is a cgroup and /proc tree in a temporary directory: a unified
// hierarchy, or v1's cpu and memory ones.
type fakeHost struct {
	t                    *testing.T
	cgroupRoot, procRoot string
	hierarchies          []string
}

func newFakeHost(t *testing.T, v2 bool) *fakeHost {
	dir := t.TempDir()
	h := &fakeHost{t: t, cgroupRoot: filepath.Join(dir, "cgroup"), procRoot: filepath.Join(dir, "proc")}
	require.NoError(t, os.MkdirAll(h.procRoot, 0o755))
	if v2 {
		require.NoError(t, os.MkdirAll(h.cgroupRoot, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(h.cgroupRoot, "cgroup.controllers"), []byte("cpu memory pids\n"), 0o644))
		h.hierarchies = []string{h.cgroupRoot}
		return h
	}
	for _, c := range []string{"cpu", "memory"} {
		p := filepath.Join(h.cgroupRoot, c)
		require.NoError(t, os.MkdirAll(p, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(p, "cgroup.procs"), []byte("1\n"), 0o644))
		h.hierarchies = append(h.hierarchies, p)
	}
	return h
}

// cgroup makes the cgroup at path in every hierarchy, holding pids.
func (h *fakeHost) cgroup(path string, pids ...int) {
	var b strings.Builder
	for _, p := range pids {
		fmt.Fprintln(&b, p)
	}
	for _, root := range h.hierarchies {
		d := filepath.Join(root, path)
		require.NoError(h.t, os.MkdirAll(d, 0o755))
		require.NoError(h.t, os.WriteFile(filepath.Join(d, "cgroup.procs"), []byte(b.String()), 0o644))
	}
}

// process makes /proc/<pid>/status with real uid uid.
func (h *fakeHost) process(pid, uid int) {
	d := filepath.Join(h.procRoot, strconv.Itoa(pid))
	require.NoError(h.t, os.MkdirAll(d, 0o755))
	require.NoError(h.t, os.WriteFile(filepath.Join(d, "status"), fmt.Appendf(nil, "Name:\tx\nUid:\t%d\t%d\t%d\t%d\n", uid, uid, uid, uid), 0o644))
}

func (h *fakeHost) users(clock *fakeClock) *Users {
	passwd := filepath.Join(h.t.TempDir(), "passwd")
	writeFile(h.t, passwd, passwdAlice+"bob:x:1001:1001::/home/bob:/bin/sh\n")
	return NewUsers(UsersOptions{PasswdFile: passwd, ProcRoot: h.procRoot, CgroupRoot: h.cgroupRoot, Now: clock.Now})
}

// TestOwnerFromProcesses: the owners a path does not name, from the
// processes in a fake cgroup tree, per runtime layout.
func TestOwnerFromProcesses(t *testing.T) {
	slurmJob := "/system.slice/node1_slurmstepd.scope/job_42"
	for _, v2 := range []bool{true, false} {
		t.Run(map[bool]string{true: "cgroup v2", false: "cgroup v1"}[v2], func(t *testing.T) {
			h := newFakeHost(t, v2)
			for pid, uid := range map[int]int{100: 0, 200: 1000, 201: 1001, 300: 1001, 400: 0, 500: 1000, 600: 4242} {
				h.process(pid, uid)
			}
			h.cgroup("/system.slice/docker-"+id1+".scope", 201, 200) // the lowest pid is the container's init
			h.cgroup("/machine.slice/libpod-"+id2+".scope", 100)     // conmon, root's
			h.cgroup("/machine.slice/libpod-"+id2+".scope/container", 300)
			h.cgroup("/system.slice/docker-"+id2+".scope", 999, 0, 600) // 999 exited, 0 another pid namespace's
			h.cgroup("/docker/" + id2)                                  // empty
			h.cgroup(slurmJob)
			h.cgroup(slurmJob+"/step_extern/slurm", 100)
			h.cgroup(slurmJob+"/step_extern/user/task_special", 400) // the extern sleep, root's
			h.cgroup(slurmJob+"/step_0/slurm", 100)
			h.cgroup(slurmJob+"/step_0/user/task_0", 500)
			h.cgroup(slurmJob+"/step_0/user/task_1", 501) // gone
			h.cgroup("/system.slice/slurmstepd.scope/job_43/step_extern/user/task_special", 400)
			// Outside the hierarchies: a path that leads here must not.
			outside := filepath.Join(h.procRoot, id1)
			require.NoError(t, os.MkdirAll(outside, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(outside, "cgroup.procs"), []byte("200\n"), 0o644))
			clock := newFakeClock()
			c := NewCache(&Options{Users: h.users(clock)})

			for _, tc := range []struct {
				path string
				md   Metadata
				want Identity
			}{
				{path: "/system.slice/docker-" + id1 + ".scope", md: Metadata{Name: "train", Runtime: "docker"},
					want: Identity{Workload: "train", Runtime: "docker", User: "alice"}},
				{path: "/machine.slice/libpod-" + id2 + ".scope", want: Identity{Workload: "podman-0123456789ab", Runtime: "podman", User: "bob"}},
				{path: "/machine.slice/libpod-" + id2 + ".scope/container", want: Identity{Workload: "podman-0123456789ab", Runtime: "podman", User: "bob"}},
				{path: "/system.slice/docker-" + id2 + ".scope", want: Identity{Workload: "docker-0123456789ab", Runtime: "docker", User: "4242"}},
				{path: "/docker/" + id2, want: Identity{Workload: "docker-0123456789ab", Runtime: "docker"}},
				{path: "/docker/" + id1, want: Identity{Workload: "docker-3f2a8c1d5e6b", Runtime: "docker"}},
				{path: slurmJob, want: Identity{Workload: "job 42", Runtime: "slurm", SlurmJob: "42", User: "alice"}},
				{path: slurmJob + "/step_extern", want: Identity{Workload: "job 42.extern", Runtime: "slurm", SlurmJob: "42", SlurmStep: "extern", User: "alice"}},
				{path: slurmJob + "/step_0/slurm", want: Identity{Workload: "job 42.0/slurm", Runtime: "slurm", SlurmJob: "42", SlurmStep: "0", User: "alice"}},
				{path: slurmJob + "/step_0/user/task_1", want: Identity{Workload: "job 42.0/user/task_1", Runtime: "slurm", SlurmJob: "42", SlurmStep: "0", User: "alice"}},
				{path: "/system.slice/slurmstepd.scope/job_43", want: Identity{Workload: "job 43", Runtime: "slurm", SlurmJob: "43"}},
				{path: "/slurm/uid_1001/job_44/step_0", want: Identity{Workload: "job 44.0", Runtime: "slurm", SlurmJob: "44", SlurmStep: "0", SlurmUser: "1001", User: "bob"}},
				{path: "/system.slice/nginx.service", want: Identity{Workload: "nginx.service", Runtime: "systemd"}},
				{path: "/gpu-burn/run-7", want: Identity{Workload: "/gpu-burn/run-7", Runtime: "cgroup"}},
				// A path that leaves the hierarchy (cgroup ids are clean paths,
				// but whatever comes) reads nothing outside it.
				{path: "/x/../../../../../../../" + h.procRoot + "/" + id1, md: Metadata{Runtime: "docker"}, want: Identity{Workload: "docker-3f2a8c1d5e6b", Runtime: "docker"}},
			} {
				require.Equal(t, tc.want, c.Get(tc.path, tc.md), tc.path)
			}
		})
	}
}

// TestOwnerPending: a container first seen empty gets its owner once a
// process shows it, looked for again after ownerRetry, the wait doubling
// while it stays empty; a found owner then stays, whatever the
// processes become, until the cgroup is forgotten.
func TestOwnerPending(t *testing.T) {
	h := newFakeHost(t, true)
	path := "/system.slice/docker-" + id1 + ".scope"
	h.cgroup(path)
	clock := newFakeClock()
	u := h.users(clock)
	c := NewCache(&Options{Users: u})
	md := Metadata{Name: "train", Runtime: "docker"}
	empty := Identity{Workload: "train", Runtime: "docker"}
	require.Equal(t, empty, c.Get(path, md))

	// Still empty at each retry: the waits are 15 s, 30 s, 60 s.
	for _, wait := range []time.Duration{ownerRetry, 2 * ownerRetry, 4 * ownerRetry} {
		clock.Add(wait - time.Second)
		require.Equal(t, empty, c.Get(path, md))
		clock.Add(time.Second)
		require.Equal(t, empty, c.Get(path, md))
	}
	h.process(7, 1000)
	h.cgroup(path, 7)
	clock.Add(8*ownerRetry - time.Second)
	require.Equal(t, empty, c.Get(path, Metadata{}), "not looked at before the wait is over")
	clock.Add(time.Second)
	want := Identity{Workload: "train", Runtime: "docker", User: "alice"}
	require.Equal(t, want, c.Get(path, Metadata{}), "the path-only caller gets the owner, and cAdvisor's name")
	require.Equal(t, want, c.Get(path, md))

	// Another process, another owner: the identity stays.
	h.process(3, 1001)
	h.cgroup(path, 3, 7)
	clock.Add(ownerRetryMax)
	require.Equal(t, want, c.Get(path, md))
	require.Equal(t, want, c.Get(path, Metadata{Name: "renamed", Runtime: "docker"}).withWorkload("train"), "new metadata keeps the owner")

	c.Forget(path)
	require.Equal(t, Identity{Workload: "train", Runtime: "docker", User: "bob"}, c.Get(path, md), "a forgotten cgroup is looked at anew")

	// The wait stops doubling at ownerRetryMax.
	h.cgroup("/docker/" + id2)
	c.Get("/docker/"+id2, Metadata{})
	for range 10 {
		clock.Add(ownerRetryMax)
		c.Get("/docker/"+id2, Metadata{})
	}
	c.mu.RLock()
	e := c.entries["/docker/"+id2]
	c.mu.RUnlock()
	require.True(t, e.pending)
	require.Equal(t, ownerRetryMax, e.wait)
}

func (id Identity) withWorkload(w string) Identity {
	id.Workload = w
	return id
}
