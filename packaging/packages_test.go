//go:build e2e

package packaging_test

import (
	"bufio"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/packaging/pkgtest"
)

// TestVersionFromGit runs build.sh's version logic against a scratch git
// repository: every answer must be semver (Grafana parses the version
// /api/v1/status/buildinfo reports) and must sort the way releases do.
func TestVersionFromGit(t *testing.T) {
	pkgtest.Require(t, false, "git", "go", "bash")
	repo := pkgtest.RepoRoot(t)
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "packaging"), 0o755))
	script, err := os.ReadFile(filepath.Join(repo, "packaging", "build.sh"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "packaging", "build.sh"), script, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte("module example.com/v\n"), 0o644))

	// HOME outside the repository: go (build.sh asks it for GOARCH) may
	// write its cache under HOME.
	gitEnv := []string{
		"HOME=" + t.TempDir(), "GIT_CONFIG_NOSYSTEM=1",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
	}
	git := func(args ...string) string {
		return strings.TrimSpace(pkgtest.Run(t, pkgtest.Cmd{Dir: dir, Env: gitEnv}, "git", args...))
	}
	commit := func() string {
		f := filepath.Join(dir, "n")
		b, _ := os.ReadFile(f)
		require.NoError(t, os.WriteFile(f, append(b, 'x'), 0o644))
		git("add", "-A")
		git("commit", "-q", "-m", "c")
		return git("rev-parse", "--short", "HEAD")
	}
	version := func(env ...string) (string, error) {
		out, errOut, err := pkgtest.Cmd{Dir: dir, Env: append(gitEnv, env...)}.Output("packaging/build.sh", "version")
		if err != nil {
			return "", fmt.Errorf("%w: %s", err, errOut)
		}
		return strings.TrimSpace(out), nil
	}
	git("init", "-q", "-b", "main")

	for _, step := range []struct {
		name    string
		change  func() string // changes the repository; returns the short sha to expect
		env     []string
		want    string // %s: the short sha
		wantErr string
	}{
		{name: "no tag yet", change: commit, want: "0.0.0-1-g%s"},
		{name: "second commit, no tag", change: commit, want: "0.0.0-2-g%s"},
		{name: "on a release tag", change: func() string { git("tag", "v1.2.3"); return "" }, want: "1.2.3"},
		{name: "after a release tag", change: commit, want: "1.2.3+1.g%s"},
		{name: "uncommitted change", change: func() string {
			require.NoError(t, os.WriteFile(filepath.Join(dir, "n"), []byte("dirty"), 0o644))
			return git("rev-parse", "--short", "HEAD")
		}, want: "1.2.3+1.g%s.dirty"},
		{name: "prerelease tag", change: func() string {
			sha := commit()
			git("tag", "v1.3.0-rc.1")
			return sha
		}, want: "1.3.0-rc.1"},
		{name: "tags not starting with v are ignored", change: func() string {
			sha := commit()
			git("tag", "release-7")
			return sha
		}, want: "1.3.0-rc.1+1.g%s"},
		{name: "VERSION wins, leading v dropped", env: []string{"VERSION=v2.0.0"}, want: "2.0.0"},
		{name: "VERSION must be semver", env: []string{"VERSION=2.0"}, wantErr: "is not semver"},
		{name: "tag must be semver", change: func() string {
			commit()
			git("tag", "v3.1")
			return ""
		}, wantErr: "is not semver"},
	} {
		sha := ""
		if step.change != nil {
			sha = step.change()
		}
		got, err := version(step.env...)
		if step.wantErr != "" {
			require.ErrorContains(t, err, step.wantErr, step.name)
			continue
		}
		require.NoError(t, err, step.name)
		want := step.want
		if strings.Contains(want, "%s") {
			want = fmt.Sprintf(want, sha)
		}
		require.Equal(t, want, got, step.name)
	}
}

// entry is one path in a package: its type and mode as ls shows them, and
// owner/group.
type entry struct {
	perms, owner string
}

// basePayload is what both packages must contain besides the docs:
// nfpm.yaml's contents. The deb also lists the standard parent directories.
var basePayload = map[string]entry{
	"/usr/bin/gpuscope":                              {"-rwxr-xr-x", "root/root"},
	"/etc/gpuscope":                                  {"drwxr-xr-x", "root/root"},
	"/etc/gpuscope/gpuscope.yml":                     {"-rw-r--r--", "root/root"},
	"/usr/lib/systemd/system/gpuscope.service":       {"-rw-r--r--", "root/root"},
	"/usr/lib/systemd/system/gpuscope-agent.service": {"-rw-r--r--", "root/root"},
	"/etc/gpuscope/agent.yml":                        {"-rw-r--r--", "root/root"},
	"/etc/default/gpuscope-agent":                    {"-rw-r--r--", "root/root"},
	"/var/lib/gpuscope":                              {"drwxr-x---", "gpuscope/gpuscope"},
	"/usr/share/man/man1/gpuscope.1.gz":              {"-rw-r--r--", "root/root"},
}

// docDir is where the packages put README.md, LICENSE and docs/.
const docDir = "/usr/share/doc/gpuscope"

// wantPayload is basePayload plus the docs of the checkout: README.md,
// LICENSE, every docs/*.md and the command-line reference, under docDir
// with docs/'s layout, and docDir's directories.
func wantPayload(t *testing.T, repo string) map[string]entry {
	t.Helper()
	want := maps.Clone(basePayload)
	for _, d := range []string{docDir, docDir + "/docs", docDir + "/docs/command-line"} {
		want[d] = entry{"drwxr-xr-x", "root/root"}
	}
	docs, err := filepath.Glob(filepath.Join(repo, "docs", "*.md"))
	require.NoError(t, err)
	require.NotEmpty(t, docs)
	for _, f := range append(docs, filepath.Join(repo, "README.md"), filepath.Join(repo, "LICENSE"), filepath.Join(repo, "docs", "command-line", "gpuscope.md")) {
		rel, err := filepath.Rel(repo, f)
		require.NoError(t, err)
		want[docDir+"/"+filepath.ToSlash(rel)] = entry{"-rw-r--r--", "root/root"}
	}
	return want
}

var debParents = []string{"/etc", "/etc/default", "/usr", "/usr/bin", "/usr/lib", "/usr/lib/systemd", "/usr/lib/systemd/system", "/var", "/var/lib",
	"/usr/share", "/usr/share/doc", "/usr/share/man", "/usr/share/man/man1"}

// TestDebAndRPM builds both packages with packaging/build.sh, compares
// their contents, installs, upgrades, removes and purges the deb in a
// Debian chroot, runs the installed binary as the service user until it is
// ready, boots the chroot's own systemd (systemd-nspawn) to install the deb
// where systemd runs and see the hardened unit start, and installs and
// erases the rpm in the same chroot with rpm's own scriptlet arguments.
// Nothing is installed on, and no service started on, the machine running
// the test.
func TestDebAndRPM(t *testing.T) {
	pkgtest.Require(t, true, "go", "git", "bash", "dpkg-deb", "rpm", "debootstrap", "chroot", "objdump", "systemd-nspawn")
	repo := pkgtest.RepoRoot(t)
	start := time.Now()

	// The chroot downloads while the binary compiles.
	// systemd: systemctl enable in the chroot, then booting it; dbus: what
	// systemctl poweroff reaches logind by; procps: /bin/kill (ExecReload);
	// curl: the checks under the booted systemd ask the API.
	rootfs := pkgtest.StartDebootstrap(t, "systemd", "dbus", "procps", "curl")

	dist := t.TempDir()
	version := strings.TrimSpace(pkgtest.Run(t, pkgtest.Cmd{Dir: repo}, "packaging/build.sh", "version"))
	pkgtest.Run(t, pkgtest.Cmd{Dir: repo, Env: []string{"DIST=" + dist, "NO_DOCKER=1"}, Timeout: 15 * time.Minute, Background: true},
		"packaging/build.sh", "all")
	t.Logf("packaging/build.sh all (binary, deb, rpm): %s", time.Since(start).Round(time.Second))
	deb := filepath.Join(dist, "gpuscope_"+version+"_amd64.deb")
	rpm := filepath.Join(dist, "gpuscope-"+version+".x86_64.rpm")
	require.FileExists(t, deb)
	require.FileExists(t, rpm)

	t.Run("deb control", func(t *testing.T) {
		fields := pkgtest.Run(t, pkgtest.Cmd{}, "dpkg-deb", "--field", deb, "Package", "Version", "Architecture")
		require.Equal(t, "Package: gpuscope\nVersion: "+debVersion(version)+"\nArchitecture: amd64\n", fields)
		conffiles := strings.Fields(pkgtest.Run(t, pkgtest.Cmd{}, "dpkg-deb", "--info", deb, "conffiles"))
		sort.Strings(conffiles)
		require.Equal(t, []string{"/etc/default/gpuscope-agent", "/etc/gpuscope/agent.yml", "/etc/gpuscope/gpuscope.yml"}, conffiles)
	})

	t.Run("glibc dependency covers the binary", func(t *testing.T) {
		need := maxGlibc(t, pkgtest.Run(t, pkgtest.Cmd{}, "objdump", "-T", filepath.Join(dist, "linux-amd64", "gpuscope")))
		depends := pkgtest.Run(t, pkgtest.Cmd{}, "dpkg-deb", "--field", deb, "Depends")
		require.Contains(t, depends, "libc6 (>= 2.34)")
		require.LessOrEqual(t, versionKey(need), versionKey("2.34"), "the binary needs GLIBC_%s; raise the libc6 and glibc dependencies in packaging/nfpm.yaml", need)
		requires := pkgtest.Run(t, pkgtest.Cmd{}, "rpm", "-qp", "--requires", rpm)
		require.Contains(t, requires, "glibc >= 2.34")
	})

	payload := wantPayload(t, repo)
	t.Run("rpm and deb hold the same files", func(t *testing.T) {
		debList := parseDebList(t, pkgtest.Run(t, pkgtest.Cmd{}, "dpkg-deb", "--contents", deb))
		for _, p := range debParents {
			require.Contains(t, debList, p)
			require.Equal(t, "drwxr-xr-x", debList[p].perms, p)
			delete(debList, p)
		}
		require.Equal(t, payload, debList, "deb contents (dpkg-deb -c)")

		rpmList := parseRPMList(t, pkgtest.Run(t, pkgtest.Cmd{}, "rpm", "-qp", "--queryformat",
			"[%{FILEMODES:perms} %{FILEUSERNAME}/%{FILEGROUPNAME} %{FILENAMES}\n]", rpm))
		require.Equal(t, payload, rpmList, "rpm contents (rpm -qp)")
		// rpm -qpl, the list a user sees, is the same set of paths.
		var paths []string
		for p := range payload {
			paths = append(paths, p)
		}
		sort.Strings(paths)
		require.Equal(t, strings.Join(paths, "\n")+"\n", pkgtest.Run(t, pkgtest.Cmd{}, "rpm", "-qpl", rpm))

		flags := pkgtest.Run(t, pkgtest.Cmd{}, "rpm", "-qp", "--queryformat", "[%{FILEFLAGS:fflags} %{FILENAMES}\n]", rpm)
		for _, f := range []string{"/etc/gpuscope/gpuscope.yml", "/etc/gpuscope/agent.yml", "/etc/default/gpuscope-agent"} {
			require.Contains(t, flags, "cn "+f+"\n", "%s must be %%config(noreplace)", f)
		}
	})

	// Each step below starts from the state the one before left.
	step := func(name string, f func(t *testing.T)) {
		if !t.Run(name, f) {
			t.FailNow()
		}
	}
	root := rootfs()
	t.Logf("ready to install after %s", time.Since(start).Round(time.Second))
	chroot := func(args ...string) string { return pkgtest.Chroot(t, root, args[0], args[1:]...) }
	copyIn := func(src string) string {
		b, err := os.ReadFile(src)
		require.NoError(t, err)
		dst := filepath.Join("/tmp", filepath.Base(src))
		require.NoError(t, os.WriteFile(filepath.Join(root, dst), b, 0o644))
		return dst
	}
	dataDir := filepath.Join(root, "var/lib/gpuscope")
	config := filepath.Join(root, "etc/gpuscope/gpuscope.yml")
	wants := filepath.Join(root, "etc/systemd/system/multi-user.target.wants/gpuscope.service")

	step("deb install", func(t *testing.T) {
		_, errOut, err := pkgtest.Cmd{Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "DEBIAN_FRONTEND=noninteractive"}}.
			Output("chroot", root, "dpkg", "-i", copyIn(deb))
		require.NoError(t, err, "dpkg -i:\n%s", errOut)
		// No systemd runs in the chroot: the postinst says how to start it.
		require.Contains(t, errOut, "gpuscope: installed but not started (systemd is not running here); start it with: systemctl start gpuscope")
		require.Contains(t, chroot("gpuscope", "version"), "gpuscope, version "+version+" ")
		require.Contains(t, chroot("gpuscope", "check", "config", "/etc/gpuscope/gpuscope.yml"), "SUCCESS")
		// Enabled, although no systemd runs here to start it.
		require.Equal(t, "enabled\n", chroot("systemctl", "is-enabled", "gpuscope.service"))
		require.FileExists(t, wants)
		// The units as installed, against the chroot's systemd (252, Debian 12).
		for _, unit := range []string{"gpuscope.service", "gpuscope-agent.service"} {
			out, errOut, err := pkgtest.Cmd{}.Output("chroot", root, "systemd-analyze", "verify", "/usr/lib/systemd/system/"+unit)
			require.NoError(t, err, "systemd-analyze verify %s:\n%s%s", unit, out, errOut)
			require.Empty(t, strings.TrimSpace(out+errOut), "systemd-analyze verify %s has complaints", unit)
		}
		// The agent is installed, not enabled: it replaces the appliance
		// only where an admin says so.
		out, _, _ := pkgtest.Cmd{}.Output("chroot", root, "systemctl", "is-enabled", "gpuscope-agent.service")
		require.Equal(t, "disabled\n", out)
		require.Contains(t, chroot("gpuscope", "check", "config", "/etc/gpuscope/agent.yml"), "SUCCESS")

		uid, gid := serviceUser(t, root)
		fi, err := os.Stat(dataDir)
		require.NoError(t, err)
		require.Equal(t, os.ModeDir|0o750, fi.Mode())
		st := fi.Sys().(*syscall.Stat_t)
		require.Equal(t, [2]uint32{uint32(uid), uint32(gid)}, [2]uint32{st.Uid, st.Gid}, "data dir owner")
		require.Contains(t, chroot("id", "-nG", "gpuscope"), "gpuscope")
	})

	step("deb installs the man page and the docs", func(t *testing.T) {
		page := chroot("zcat", "/usr/share/man/man1/gpuscope.1.gz")
		want, err := os.ReadFile(filepath.Join(repo, "docs", "gpuscope.1"))
		require.NoError(t, err)
		require.Equal(t, string(want), page, "the installed man page is docs/gpuscope.1")
		require.Contains(t, page, ".TH ")
		// The page as man renders it, where this machine has man (the
		// chroot's minimal Debian has not).
		if _, err := exec.LookPath("man"); err == nil {
			out, errOut, err := pkgtest.Cmd{Env: []string{"MANWIDTH=100", "MAN_KEEP_FORMATTING=0", "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}}.
				Output("man", "-l", filepath.Join(root, "usr/share/man/man1/gpuscope.1.gz"))
			require.NoError(t, err, "man -l:\n%s", errOut)
			require.Contains(t, out, "gpuscope")
			require.Contains(t, out, "serve")
		} else {
			t.Log("no man on this machine: the page was checked with zcat only")
		}
		for _, f := range []string{"README.md", "LICENSE", "docs/install.md", "docs/alerts.md", "docs/command-line/gpuscope.md"} {
			require.FileExists(t, filepath.Join(root, docDir, f))
		}
	})

	step("first run as the service user", func(t *testing.T) {
		// The unit's command line, with the chroot's paths, as gpuscope's
		// uid and no capabilities: what systemd would run.
		uid, gid := serviceUser(t, root)
		openPath(t, root)
		port := pkgtest.FreePort(t)
		url := "http://127.0.0.1:" + strconv.Itoa(port)
		p := startProcess(t, &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)},
			filepath.Join(root, "usr/bin/gpuscope"), "serve",
			"--config.file="+config,
			"--storage.tsdb.path="+dataDir,
			"--web.listen-address=127.0.0.1:"+strconv.Itoa(port))
		pkgtest.WaitReady(t, url, 90*time.Second, p.done)
		require.Contains(t, pkgtest.Get(t, url+"/api/v1/status/buildinfo"), `"version":"`+version+`"`)
		p.stop()
		require.DirExists(t, filepath.Join(dataDir, "wal"), "the TSDB writes its WAL into the data dir\n%s", p.out.String())
	})

	// A newer build, for the upgrades below.
	const next = "99.0.0"
	nextDeb := filepath.Join(t.TempDir(), "gpuscope_"+next+"_amd64.deb")
	step("deb upgrade keeps an edited config and the data", func(t *testing.T) {
		dist2 := filepath.Dir(nextDeb)
		pkgtest.Run(t, pkgtest.Cmd{Dir: repo, Env: []string{"DIST=" + dist2, "VERSION=" + next}, Timeout: 15 * time.Minute, Background: true},
			"packaging/build.sh", "deb")
		f, err := os.OpenFile(config, os.O_APPEND|os.O_WRONLY, 0)
		require.NoError(t, err)
		_, err = f.WriteString("# edited by the admin\n")
		require.NoError(t, err)
		require.NoError(t, f.Close())

		chroot("dpkg", "-i", copyIn(nextDeb))
		require.Contains(t, chroot("gpuscope", "version"), "gpuscope, version "+next+" ")
		b, err := os.ReadFile(config)
		require.NoError(t, err)
		require.Contains(t, string(b), "# edited by the admin\n")
		require.DirExists(t, filepath.Join(dataDir, "wal"))
		require.FileExists(t, wants, "an upgrade keeps the service enabled")
	})

	step("deb remove keeps the data, purge deletes it", func(t *testing.T) {
		chroot("dpkg", "--remove", "gpuscope")
		require.NoFileExists(t, filepath.Join(root, "usr/bin/gpuscope"))
		require.NoFileExists(t, wants, "removal disables the service")
		require.DirExists(t, filepath.Join(dataDir, "wal"), "removal keeps the data")
		require.FileExists(t, config, "removal keeps the conffile")
		require.NoDirExists(t, filepath.Join(root, docDir), "removal removes the docs")

		chroot("dpkg", "--purge", "gpuscope")
		require.NoDirExists(t, dataDir, "purge deletes the data")
		require.NoDirExists(t, filepath.Join(root, "etc/gpuscope"), "purge deletes the config")
		// The user stays (Debian policy): files it owned elsewhere must not
		// pass to a reused uid.
		chroot("id", "gpuscope")
	})

	step("deb under a running systemd", func(t *testing.T) {
		// The chroot boots its own systemd (252) as PID 1 in a container;
		// a oneshot unit installs the deb there, so the postinst sees
		// systemd running and must start the hardened unit; it takes a
		// backup as the service user, runs the agent's unit in the
		// appliance's place, upgrades the deb in place, records what it
		// sees, then powers off.
		// /root, not /tmp: the booted systemd mounts a fresh /tmp.
		for _, f := range []string{deb, nextDeb} {
			b, err := os.ReadFile(f)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(filepath.Join(root, "root", filepath.Base(f)), b, 0o644))
		}
		require.NoError(t, os.WriteFile(filepath.Join(root, "usr/local/bin/gpuscope-check"), []byte(systemdCheck(filepath.Base(deb), filepath.Base(nextDeb))), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(root, "etc/systemd/system/gpuscope-check.service"), []byte(`[Unit]
Description=install gpuscope under systemd and record what happens
After=multi-user.target
[Service]
Type=oneshot
ExecStart=/usr/local/bin/gpuscope-check
[Install]
WantedBy=default.target
`), 0o644))
		chroot("systemctl", "enable", "gpuscope-check.service")
		bootNspawn(t, root, 5*time.Minute)
		out, err := os.ReadFile(filepath.Join(root, "root/gpuscope-check.out"))
		require.NoError(t, err, "the check unit wrote nothing: did the container boot?")
		journal, _ := os.ReadFile(filepath.Join(root, "root/gpuscope.journal"))
		agentJournal, _ := os.ReadFile(filepath.Join(root, "root/gpuscope-agent.journal"))
		journal = append(append(journal, "\n--- journal of gpuscope-agent.service:\n"...), agentJournal...)
		got := map[string]string{}
		for line := range strings.SplitSeq(string(out), "\n") {
			if k, v, ok := strings.Cut(line, "="); ok && !strings.Contains(k, " ") {
				got[k] = strings.TrimSpace(v)
			}
		}
		want := map[string]string{
			"active-after-install":   "active",
			"enabled-after-install":  "enabled",
			"ready":                  "yes",
			"user":                   "gpuscope",
			"capeff":                 "0000000000000000",
			"active-after-reload":    "active",
			"backup":                 "taken",
			"agent-enabled":          "disabled",
			"agent-serving":          "yes",
			"agent-active":           "active",
			"agent-user":             "gpuscope",
			"appliance-beside-agent": "inactive",
			"agent-after-appliance":  "inactive",
			"active-after-upgrade":   "active",
			"version-after-upgrade":  next,
			"data-after-upgrade":     "present",
			"active-after-remove":    "inactive",
			"data-after-remove":      "present",
			"data-after-purge":       "gone",
		}
		for k, v := range want {
			require.Equal(t, v, got[k], "%s\n--- check output:\n%s\n--- journal of gpuscope.service:\n%s", k, out, journal)
		}
		// The upgrade kept every scrape and sample stored before it,
		// counted at a time the appliance was stopped.
		for _, k := range []string{"scrapes", "samples"} {
			n, err := strconv.ParseFloat(got[k+"-before-upgrade"], 64)
			require.NoError(t, err, "%s stored before the upgrade\n--- check output:\n%s", k, out)
			require.Positive(t, n, "%s stored before the upgrade\n--- check output:\n%s", k, out)
			require.Equal(t, got[k+"-before-upgrade"], got[k+"-after-upgrade"], "%s kept through the upgrade\n--- check output:\n%s", k, out)
		}
	})

	step("rpm install and erase", func(t *testing.T) {
		// rpm runs the scriptlets inside --root with its own arguments
		// (1 = install, 0 = erase); --nodeps because this rpm database
		// knows nothing of the Debian packages that provide glibc.
		rpmRoot := []string{"--root=" + root, "--dbpath=/var/lib/rpm-test", "--nodeps"}
		pkgtest.Run(t, pkgtest.Cmd{}, "rpm", append(rpmRoot, "-i", rpm)...)
		require.Contains(t, chroot("gpuscope", "version"), "gpuscope, version "+version+" ")
		require.FileExists(t, wants, "rpm %%post enables the service")
		require.NoError(t, os.WriteFile(filepath.Join(dataDir, "keep"), []byte("tsdb"), 0o640))

		pkgtest.Run(t, pkgtest.Cmd{}, "rpm", append(rpmRoot, "-e", "gpuscope")...)
		require.NoFileExists(t, filepath.Join(root, "usr/bin/gpuscope"))
		require.NoFileExists(t, wants, "rpm %%preun disables the service")
		require.FileExists(t, filepath.Join(dataDir, "keep"), "rpm -e keeps the data")
		require.NoDirExists(t, filepath.Join(root, docDir), "rpm -e removes the docs")
		require.NoFileExists(t, filepath.Join(root, "usr/share/man/man1/gpuscope.1.gz"), "rpm -e removes the man page")
	})
	t.Logf("total %s", time.Since(start).Round(time.Second))
}

// systemdCheck is the script the check unit runs inside the booted
// container: it installs the deb, later upgrades it to nextDeb, and
// reports key=value lines.
func systemdCheck(deb, nextDeb string) string {
	return `#!/bin/bash
exec > /root/gpuscope-check.out 2>&1
get() { curl -fsS --max-time 10 "http://127.0.0.1:9089$1"; }
ready() { get /-/ready 2>/dev/null | grep -q 'gpuscope is Ready'; }
wait_ready() { for i in $(seq 90); do if ready; then return 0; fi; sleep 1; done; return 1; }
dpkg -i /root/` + deb + `
echo "active-after-install=$(systemctl is-active gpuscope.service)"
echo "enabled-after-install=$(systemctl is-enabled gpuscope.service)"
if wait_ready; then echo ready=yes; else echo ready=no; fi
pid=$(systemctl show -p MainPID --value gpuscope.service)
echo "user=$(ps -o user= -p "$pid")"
echo "capeff=$(awk '/^CapEff/ {print $2}' /proc/$pid/status)"
systemctl reload gpuscope.service
sleep 2
echo "active-after-reload=$(systemctl is-active gpuscope.service)"

# A backup as the service user, over the control socket, into the data
# directory (the only place the hardened unit may write).
if out=$(runuser -u gpuscope -- gpuscope backup --storage.tsdb.path=/var/lib/gpuscope 2>&1); then
	echo "backup-said: $out"
	dir=$(echo "$out" | sed -n 's/^backup \([^ ]*\) .*/\1/p')
	if [ -f "$dir/backup.json" ]; then echo backup=taken; else echo "backup=no manifest in '$dir'"; fi
else
	echo "backup=failed: $out"
fi

# The agent: installed disabled; started, it takes the appliance's place
# (Conflicts=), which stops cleanly: every sample up to now is on disk.
# First a scrape stored, for the upgrade's comparison below (a target's
# first scrape comes up to a scrape interval after the start).
# -G --data-urlencode: a query's [1h] in a URL is curl's glob syntax.
value() { sed -n 's/.*"value":\[[^,]*,"\([^"]*\)"\].*/\1/p'; }
for i in $(seq 60); do
	n=$(curl -fsS -G --max-time 10 --data-urlencode 'query=sum(count_over_time(up[1h]))' http://127.0.0.1:9089/api/v1/query | value)
	[ -n "$n" ] && break
	sleep 1
done
echo "agent-enabled=$(systemctl is-enabled gpuscope-agent.service)"
systemctl start gpuscope-agent.service
a=no; for i in $(seq 60); do if get /metrics/gpu >/dev/null 2>&1; then a=yes; break; fi; sleep 1; done
echo "agent-serving=$a"
echo "agent-active=$(systemctl is-active gpuscope-agent.service)"
echo "appliance-beside-agent=$(systemctl is-active gpuscope.service)"
apid=$(systemctl show -p MainPID --value gpuscope-agent.service)
echo "agent-user=$(ps -o user= -p "$apid")"
journalctl -u gpuscope-agent.service --no-pager > /root/gpuscope-agent.journal
# A time while the appliance is stopped: what it stored up to then is
# all it will ever store up to then, so the upgrade must keep exactly it.
stopped_at=$(date +%s)
systemctl start gpuscope.service
wait_ready
stored() { curl -fsS -G --max-time 10 --data-urlencode "query=$1" --data-urlencode "time=$stopped_at" http://127.0.0.1:9089/api/v1/query | value; }
echo "scrapes-before-upgrade=$(stored 'sum(count_over_time(up[1h]))')"
echo "samples-before-upgrade=$(stored 'sum(sum_over_time(scrape_samples_scraped[1h]))')"
echo "agent-after-appliance=$(systemctl is-active gpuscope-agent.service)"

# Upgrade in place with the service running: it restarts on the new
# version, on the same data directory.
dpkg -i /root/` + nextDeb + `
wait_ready
echo "active-after-upgrade=$(systemctl is-active gpuscope.service)"
echo "version-after-upgrade=$(get /api/v1/status/buildinfo | sed -n 's/.*"version":"\([^"]*\)".*/\1/p')"
if [ -d /var/lib/gpuscope/wal ]; then echo data-after-upgrade=present; else echo data-after-upgrade=missing; fi
echo "scrapes-after-upgrade=$(stored 'sum(count_over_time(up[1h]))')"
echo "samples-after-upgrade=$(stored 'sum(sum_over_time(scrape_samples_scraped[1h]))')"
journalctl -u gpuscope.service --no-pager > /root/gpuscope.journal
dpkg --remove gpuscope
echo "active-after-remove=$(systemctl is-active gpuscope.service)"
if [ -d /var/lib/gpuscope/wal ]; then echo data-after-remove=present; else echo data-after-remove=missing; fi
dpkg --purge gpuscope
if [ -e /var/lib/gpuscope ]; then echo data-after-purge=present; else echo data-after-purge=gone; fi
systemctl disable gpuscope-check.service
systemctl poweroff
`
}

// bootNspawn boots root's systemd with systemd-nspawn and waits for it to
// power off. Outside a systemd host there is no bus to register the
// machine or a scope with, so nspawn keeps the test's own cgroup.
func bootNspawn(t *testing.T, root string, timeout time.Duration) {
	t.Helper()
	args := []string{"--quiet", "--register=no", "--directory=" + root, "--boot"}
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		args = append([]string{"--keep-unit"}, args...)
	}
	_, statErr := os.Stat("/run/systemd/nspawn")
	out, errOut, err := pkgtest.Cmd{Timeout: timeout}.Output("systemd-nspawn", args...)
	if statErr != nil {
		// nspawn leaves its lock and propagation directories behind.
		_ = os.RemoveAll("/run/systemd/nspawn")
	}
	pkgtest.RefuseMounts(t, root)
	require.NoError(t, err, "systemd-nspawn %s\n%s%s", strings.Join(args, " "), out, errOut)
}

// debVersion is the Version nfpm writes for a semver: the prerelease after
// '~' (sorts before the release), metadata after '+', then release 1.
func debVersion(v string) string {
	core, meta, _ := strings.Cut(v, "+")
	core, pre, hasPre := strings.Cut(core, "-")
	out := core
	if hasPre {
		out += "~" + pre
	}
	if meta != "" {
		out += "+" + meta
	}
	return out + "-1"
}

func parseDebList(t *testing.T, s string) map[string]entry {
	t.Helper()
	m := map[string]entry{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		// drwxr-x--- gpuscope/gpuscope 0 2026-01-01 00:00 ./var/lib/gpuscope/
		f := strings.Fields(sc.Text())
		require.Len(t, f, 6, sc.Text())
		p := strings.TrimSuffix(strings.TrimPrefix(f[5], "."), "/")
		if p == "" {
			continue
		}
		m[p] = entry{perms: f[0], owner: f[1]}
	}
	return m
}

func parseRPMList(t *testing.T, s string) map[string]entry {
	t.Helper()
	m := map[string]entry{}
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		require.Len(t, f, 3, sc.Text())
		m[f[2]] = entry{perms: f[0], owner: f[1]}
	}
	return m
}

var glibcRe = regexp.MustCompile(`GLIBC_([0-9]+(?:\.[0-9]+)*)`)

// maxGlibc is the newest GLIBC_x.y symbol version objdump -T lists.
func maxGlibc(t *testing.T, objdump string) string {
	t.Helper()
	best := ""
	for _, m := range glibcRe.FindAllStringSubmatch(objdump, -1) {
		if best == "" || versionKey(m[1]) > versionKey(best) {
			best = m[1]
		}
	}
	require.NotEmpty(t, best, "no GLIBC_ symbol versions: is the binary still cgo?")
	return best
}

// versionKey orders dotted versions of up to three parts below 1000.
func versionKey(v string) int {
	key := 0
	parts := strings.Split(v, ".")
	for i := range 3 {
		key *= 1000
		if i < len(parts) {
			n, _ := strconv.Atoi(parts[i])
			key += n
		}
	}
	return key
}

// serviceUser is the uid and gid of gpuscope in the chroot's passwd.
func serviceUser(t *testing.T, root string) (int, int) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "etc/passwd"))
	require.NoError(t, err)
	for line := range strings.SplitSeq(string(b), "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 7 && f[0] == "gpuscope" {
			uid, err := strconv.Atoi(f[2])
			require.NoError(t, err)
			gid, err := strconv.Atoi(f[3])
			require.NoError(t, err)
			require.Equal(t, "/usr/sbin/nologin", f[6], "the service user has no shell")
			return uid, gid
		}
	}
	t.Fatal("no gpuscope user in the chroot's /etc/passwd")
	return 0, 0
}

// openPath lets other users traverse the directories above root, which
// t.TempDir creates 0700, so the service user can reach its files.
func openPath(t *testing.T, root string) {
	t.Helper()
	for d := root; d != "/" && d != os.TempDir(); d = filepath.Dir(d) {
		fi, err := os.Stat(d)
		require.NoError(t, err)
		require.NoError(t, os.Chmod(d, fi.Mode().Perm()|0o011))
	}
}

// process is a gpuscope started by the test; it is stopped at cleanup.
type process struct {
	cmd    *exec.Cmd
	out    *pkgtest.SyncBuffer
	done   chan struct{}
	err    error
	stopMu sync.Once
}

func startProcess(t *testing.T, cred *syscall.Credential, name string, args ...string) *process {
	t.Helper()
	p := &process{cmd: exec.Command(name, args...), out: &pkgtest.SyncBuffer{}, done: make(chan struct{})}
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	require.NoError(t, p.cmd.Start())
	go func() {
		p.err = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("%s %v output:\n%s", name, args, p.out.String())
		}
	})
	return p
}

// stop sends SIGTERM, as systemd does, and waits for the exit.
func (p *process) stop() {
	p.stopMu.Do(func() {
		_ = p.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-p.done:
		case <-time.After(30 * time.Second):
			_ = p.cmd.Process.Kill()
			<-p.done
		}
	})
}
