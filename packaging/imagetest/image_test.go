// Package imagetest builds gpuscope's container image from
// packaging/Dockerfile with packaging/build.sh and runs it the way the
// README's `docker run` line does, on a private Docker daemon.
//
// It is its own package, not part of packaging's tests, because go test
// gives each package's tests ten minutes and a cold build of gpuscope in a
// container takes several on a small machine.
package imagetest

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/gpuscope/gpuscope/packaging/pkgtest"
)

// Local base images: the test machine reaches package registries but not
// Docker Hub, so the Dockerfile's stages get images made from a
// debootstrap'ed Debian 12 (what golang:1.26-bookworm and
// debian:bookworm-slim are built from) through its GO_IMAGE and
// RUNTIME_IMAGE arguments.
const (
	runtimeImage = "gpuscope-ci/bookworm"
	builderImage = "gpuscope-ci/golang"
	image        = "gpuscope-ci/gpuscope"
)

func TestImage(t *testing.T) {
	pkgtest.Require(t, true, "dockerd", "docker", "debootstrap", "chroot", "go", "git", "tar", "cp")
	// A cold build of gpuscope in a container: about 5 minutes on two idle
	// cores, 13 on two shared ones, plus debootstrap and the imports.
	pkgtest.RequireTime(t, 25*time.Minute)
	repo := pkgtest.RepoRoot(t)
	start := time.Now()

	rootfs := pkgtest.StartDebootstrap(t, "ca-certificates")
	d := startDaemon(t)
	root := rootfs()
	t.Logf("daemon up and Debian root ready after %s", time.Since(start).Round(time.Second))

	// Runtime base: the minimal Debian as it is (slim's contents: glibc,
	// ldconfig and its cache, a shell).
	d.importRoot(t, root, runtimeImage)

	// Builder base: the same Debian with gcc and the Go toolchain these
	// tests run with (go.mod's go line needs at least that release).
	builder := filepath.Join(t.TempDir(), "builder")
	pkgtest.Run(t, pkgtest.Cmd{}, "cp", "-a", root, builder)
	resolv, err := os.ReadFile("/etc/resolv.conf")
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(builder, "etc/resolv.conf"), resolv, 0o644))
	pkgtest.Chroot(t, builder, "nice", "-n", "10", "sh", "-c", "apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*")
	goroot := strings.TrimSpace(pkgtest.Run(t, pkgtest.Cmd{}, "go", "env", "GOROOT"))
	pkgtest.Run(t, pkgtest.Cmd{}, "cp", "-a", goroot, filepath.Join(builder, "usr/local/go"))
	d.importRoot(t, builder, builderImage, "--change", "ENV PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
	require.NoError(t, os.RemoveAll(builder))
	t.Logf("base images imported after %s", time.Since(start).Round(time.Second))

	// The real build script. DOCKER_VENDOR=1: the registries are reached
	// through a TLS-intercepting proxy whose CA only this machine trusts, so
	// a container cannot download modules; vendor/ from the local module
	// cache makes the build need no network at all, and --network=none
	// proves it (this daemon has no bridge anyway).
	version := strings.TrimSpace(pkgtest.Run(t, pkgtest.Cmd{Dir: repo}, "packaging/build.sh", "version"))
	buildStart := time.Now()
	out := pkgtest.Run(t, pkgtest.Cmd{Dir: repo, Timeout: 20 * time.Minute, Background: true, Env: append(d.env(),
		"DOCKER="+d.cli, "IMAGE="+image, "DOCKER_VENDOR=1", "DOCKER_BUILD_FLAGS=--network=none",
		"GO_IMAGE="+builderImage, "RUNTIME_IMAGE="+runtimeImage)},
		"packaging/build.sh", "image")
	require.Equal(t, image+":"+version+"\n", out)
	t.Logf("docker build: %s", time.Since(buildStart).Round(time.Second))

	ref := image + ":" + version
	require.Contains(t, d.run(t, "run", "--rm", "--network", "none", ref, "version"), "gpuscope, version "+version+" ")

	var inspect []struct {
		Size   int64
		Config struct {
			Entrypoint, Cmd []string
			ExposedPorts    map[string]struct{}
			Volumes         map[string]struct{}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(d.run(t, "image", "inspect", ref)), &inspect))
	require.Len(t, inspect, 1)
	require.Equal(t, []string{"/usr/bin/gpuscope"}, inspect[0].Config.Entrypoint)
	require.Contains(t, inspect[0].Config.ExposedPorts, "9089/tcp")
	require.Contains(t, inspect[0].Config.Volumes, "/var/lib/gpuscope")
	t.Logf("image %s: %d MB", ref, inspect[0].Size>>20)

	// The gpuscope service of compose.yaml (the README's docker run line is
	// the same), less the GPU reservation (no NVIDIA toolkit here) and the
	// port: this daemon has no bridge (it leaves the machine's network
	// alone), so the container shares the host's network and listens on a
	// free loopback port instead of 9089.
	compose := readCompose(t, repo)
	svc := compose.Services["gpuscope"]
	port := pkgtest.FreePort(t)
	args := []string{"run", "-d", "--name", "gpuscope-imagetest", "--network", "host",
		"--pid", svc.PID, "--cgroupns", svc.Cgroup, "--uts", svc.UTS}
	for _, v := range svc.Volumes {
		src, _, _ := strings.Cut(v, ":")
		if strings.HasPrefix(src, "/") {
			// Only mounts whose source exists: docker would create a
			// missing one on this machine.
			if _, err := os.Stat(src); err != nil {
				t.Logf("not mounting %s: %v", v, err)
				continue
			}
		} else {
			v = "gpuscope-imagetest-" + v // a named volume, private to the test
		}
		args = append(args, "-v", v)
	}
	args = append(args, ref,
		"serve", "--config.file=/etc/gpuscope/gpuscope.yml", "--storage.tsdb.path=/var/lib/gpuscope",
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(port))
	d.run(t, args...)
	t.Cleanup(func() {
		if t.Failed() {
			logs, _, _ := pkgtest.Cmd{Env: d.env()}.Output(d.cli, "logs", "gpuscope-imagetest")
			t.Logf("container output:\n%s", logs)
		}
		_, _, _ = pkgtest.Cmd{Env: d.env()}.Output(d.cli, "rm", "-f", "gpuscope-imagetest")
	})

	url := "http://127.0.0.1:" + strconv.Itoa(port)
	pkgtest.WaitReady(t, url, 90*time.Second, nil)
	t.Logf("image ready %s after start of test", time.Since(start).Round(time.Second))
	require.Contains(t, pkgtest.Get(t, url+"/api/v1/status/buildinfo"), `"version":"`+version+`"`)
	// cAdvisor reads the host's cgroups through the /sys mount: the root
	// cgroup is there, with its workload identity (a raw cgroup).
	require.Contains(t, pkgtest.Get(t, url+"/metrics/cadvisor"), `container_cpu_usage_seconds_total{cpu="total",id="/",runtime="cgroup",workload="/"}`)
	// --uts host: the node name, and so `instance`, is the host's name.
	host, err := os.Hostname()
	require.NoError(t, err)
	require.Contains(t, pkgtest.Get(t, url+"/"), host)

	// compose.yaml's one-shot provisioner, run as compose would run it,
	// must leave Grafana's provisioning where the grafana service mounts
	// it: the data source (uid gpuscope, url http://gpuscope:9089) and a
	// dashboard provider whose path holds the dashboards.
	prov := compose.Services["grafana-provision"]
	require.Len(t, prov.Volumes, 1)
	vol, provPath, _ := strings.Cut(prov.Volumes[0], ":")
	grafanaPath := ""
	for _, v := range compose.Services["grafana"].Volumes {
		if name, rest, _ := strings.Cut(v, ":"); name == vol {
			grafanaPath, _, _ = strings.Cut(rest, ":")
		}
	}
	require.Equal(t, "/etc/grafana/provisioning", grafanaPath, "grafana mounts the provisioner's volume where Grafana reads provisioning")
	require.Equal(t, grafanaPath, provPath, "the provisioner writes at the path Grafana reads, so the provider's dashboard path holds")
	testVol := "gpuscope-imagetest-" + vol
	d.run(t, append([]string{"run", "--rm", "--network", "none", "-v", testVol + ":" + provPath, ref}, prov.Command...)...)
	cat := func(path string) string {
		return d.run(t, "run", "--rm", "--network", "none", "-v", testVol+":"+grafanaPath+":ro", "--entrypoint", "cat", ref, path)
	}
	ds := cat(grafanaPath + "/datasources/gpuscope.yaml")
	for _, want := range []string{"type: prometheus", "uid: gpuscope", "url: http://gpuscope:9089", "timeInterval: 15s"} {
		require.Contains(t, ds, want)
	}
	provider := cat(grafanaPath + "/dashboards/gpuscope.yaml")
	require.Contains(t, provider, "path: "+grafanaPath+"/dashboards/gpuscope")
	list := d.run(t, "run", "--rm", "--network", "none", "-v", testVol+":"+grafanaPath+":ro", "--entrypoint", "ls", ref, grafanaPath+"/dashboards/gpuscope")
	require.Contains(t, list, "gpuscope-gpu-overview.json")
	t.Logf("total %s", time.Since(start).Round(time.Second))
}

// composeFile is the part of packaging/compose.yaml the test runs.
type composeFile struct {
	Services map[string]struct {
		Command []string `yaml:"command"`
		PID     string   `yaml:"pid"`
		Cgroup  string   `yaml:"cgroup"`
		UTS     string   `yaml:"uts"`
		Volumes []string `yaml:"volumes"`
	} `yaml:"services"`
}

func readCompose(t *testing.T, repo string) composeFile {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "packaging", "compose.yaml"))
	require.NoError(t, err)
	var c composeFile
	require.NoError(t, yaml.Unmarshal(b, &c))
	for _, s := range []string{"gpuscope", "grafana-provision", "grafana"} {
		require.Contains(t, c.Services, s)
	}
	return c
}

// daemon is a dockerd started by the test with its own socket, data and
// state directories, no bridge and no iptables rules: it changes nothing
// on the machine and does not meet a daemon that may already run there.
type daemon struct {
	dir, sock, cli string
}

func (d *daemon) env() []string { return []string{"DOCKER_HOST=unix://" + d.sock} }

func (d *daemon) run(t *testing.T, args ...string) string {
	t.Helper()
	return pkgtest.Run(t, pkgtest.Cmd{Env: d.env(), Timeout: 10 * time.Minute}, d.cli, args...)
}

// importRoot makes an image of a root file system directory.
func (d *daemon) importRoot(t *testing.T, root, name string, importArgs ...string) {
	t.Helper()
	tarCmd := exec.Command("tar", "-C", root, "-c", ".")
	imp := exec.Command(d.cli, append(append([]string{"import"}, importArgs...), "-", name)...)
	imp.Env = append(os.Environ(), d.env()...)
	pipe, err := tarCmd.StdoutPipe()
	require.NoError(t, err)
	imp.Stdin = pipe
	var tarErr, impOut pkgtest.SyncBuffer
	tarCmd.Stderr = &tarErr
	imp.Stdout, imp.Stderr = &impOut, &impOut
	require.NoError(t, tarCmd.Start())
	require.NoError(t, imp.Run(), "docker import %s: %s", name, impOut.String())
	require.NoError(t, tarCmd.Wait(), "tar %s: %s", root, tarErr.String())
}

func startDaemon(t *testing.T) *daemon {
	t.Helper()
	// Not t.TempDir: the directory is removed only once the daemon is gone
	// and nothing is mounted below it (its overlay mounts).
	dir, err := os.MkdirTemp("", "gpuscope-dockerd")
	require.NoError(t, err)
	cli, err := exec.LookPath("docker")
	require.NoError(t, err)
	d := &daemon{dir: dir, sock: filepath.Join(dir, "docker.sock"), cli: cli}
	log := &pkgtest.SyncBuffer{}
	// nice 10, inherited by containerd and the build's containers: the cold
	// compile must not starve other packages' tests running beside it.
	cmd := exec.Command("nice", "-n", "10", "dockerd",
		"--host=unix://"+d.sock,
		"--data-root="+filepath.Join(dir, "data"),
		"--exec-root="+filepath.Join(dir, "exec"),
		"--pidfile="+filepath.Join(dir, "docker.pid"),
		"--bridge=none", "--iptables=false", "--ip-masq=false")
	cmd.Stdout, cmd.Stderr = log, log
	// If go test kills this binary (timeout), no cleanup runs: dockerd gets
	// SIGTERM from the kernel and stops its containers itself.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	require.NoError(t, cmd.Start())
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() {
		// Containers first, then the daemon, then its directory.
		_, _, _ = pkgtest.Cmd{Env: d.env(), Timeout: time.Minute}.Output(cli, "rm", "-f", "gpuscope-imagetest")
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("dockerd log:\n%s", log.String())
		}
		if mounts := mountsBelow(t, dir); len(mounts) > 0 {
			for _, m := range mounts {
				_ = syscall.Unmount(m, syscall.MNT_DETACH)
			}
			if mounts = mountsBelow(t, dir); len(mounts) > 0 {
				t.Errorf("left %s in place: still mounted below it: %v", dir, mounts)
				return
			}
		}
		if err := os.RemoveAll(dir); err != nil {
			t.Errorf("remove the daemon's directory: %v", err)
		}
	})

	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, _, err := pkgtest.Cmd{Env: d.env(), Timeout: 10 * time.Second}.Output(cli, "version")
		if err == nil {
			return d
		}
		select {
		case err := <-done:
			// Say exactly why, so the report can say why no image was built.
			t.Fatalf("dockerd exited at start: %v\n%s", err, log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("dockerd not answering after 2m: %v\n%s", err, log.String())
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// mountsBelow lists the mount points at or under dir.
func mountsBelow(t *testing.T, dir string) []string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	require.NoError(t, err)
	defer f.Close()
	var out []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			out = append(out, fields[4])
		}
	}
	return out
}
