//go:build e2e

package imagetest

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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
	pkgtest.Require(t, true, "dockerd", "docker", "debootstrap", "chroot", "go", "git", "tar", "cp", pkgtest.BusyboxPath)
	// GPUSCOPE_TEST_IMAGE_FROM_SOURCE=1 builds gpuscope in the container,
	// as a plain `docker build` does: a cold build, about 5 minutes on two
	// idle cores, 13 on two shared ones. By default the image holds the
	// binary build.sh built here, as `build.sh all` puts into deb, rpm and
	// image alike; the packaging tier's TestDebAndRPM has just built the
	// same binary, so this one comes from the build cache.
	fromSource := os.Getenv("GPUSCOPE_TEST_IMAGE_FROM_SOURCE") == "1"
	if fromSource {
		pkgtest.RequireTime(t, 25*time.Minute)
	} else {
		pkgtest.RequireTime(t, 8*time.Minute)
	}
	repo := pkgtest.RepoRoot(t)
	start := time.Now()

	rootfs := pkgtest.StartDebootstrap(t, "ca-certificates")
	d := pkgtest.StartDockerd(t, pkgtest.DockerdOptions{Background: true})
	root := rootfs()
	t.Logf("daemon up and Debian root ready after %s", time.Since(start).Round(time.Second))

	// Runtime base: the minimal Debian as it is (slim's contents: glibc,
	// ldconfig and its cache, a shell).
	d.ImportRoot(t, root, runtimeImage)

	// The real build script. --network=none: the build downloads nothing
	// (this daemon has no bridge anyway).
	env := append(d.Env(), "DOCKER="+d.CLI, "IMAGE="+image, "DOCKER_BUILD_FLAGS=--network=none", "RUNTIME_IMAGE="+runtimeImage)
	if fromSource {
		// Builder base: the same Debian with gcc and the Go toolchain
		// these tests run with (go.mod's go line needs at least that
		// release).
		builder := filepath.Join(t.TempDir(), "builder")
		pkgtest.Run(t, pkgtest.Cmd{}, "cp", "-a", root, builder)
		resolv, err := os.ReadFile("/etc/resolv.conf")
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join(builder, "etc/resolv.conf"), resolv, 0o644))
		pkgtest.Chroot(t, builder, "nice", "-n", "10", "sh", "-c", "apt-get update -qq && apt-get install -y -qq --no-install-recommends gcc libc6-dev >/dev/null && apt-get clean && rm -rf /var/lib/apt/lists/*")
		goroot := strings.TrimSpace(pkgtest.Run(t, pkgtest.Cmd{}, "go", "env", "GOROOT"))
		pkgtest.Run(t, pkgtest.Cmd{}, "cp", "-a", goroot, filepath.Join(builder, "usr/local/go"))
		d.ImportRoot(t, builder, builderImage, "--change", "ENV PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin")
		require.NoError(t, os.RemoveAll(builder))
		t.Logf("builder image imported after %s", time.Since(start).Round(time.Second))
		// DOCKER_VENDOR=1: the registries are reached through a
		// TLS-intercepting proxy whose CA only this machine trusts, so a
		// container cannot download modules; vendor/ from the local
		// module cache makes the build need no network at all.
		env = append(env, "DOCKER_VENDOR=1", "GO_IMAGE="+builderImage)
	} else {
		bin := filepath.Join(t.TempDir(), "gpuscope")
		pkgtest.Run(t, pkgtest.Cmd{Dir: repo, Timeout: 10 * time.Minute, Env: []string{"OUT=" + bin}}, "packaging/build.sh", "binary")
		// The build stage only copies the binary: the runtime base (a
		// shell and the CA roots) serves as its base.
		env = append(env, "IMAGE_BINARY="+bin, "GO_IMAGE="+runtimeImage)
	}
	version := strings.TrimSpace(pkgtest.Run(t, pkgtest.Cmd{Dir: repo}, "packaging/build.sh", "version"))
	buildStart := time.Now()
	out := pkgtest.Run(t, pkgtest.Cmd{Dir: repo, Timeout: 20 * time.Minute, Background: true, Env: env},
		"packaging/build.sh", "image")
	require.Equal(t, image+":"+version+"\n", out)
	t.Logf("docker build (from source: %v): %s", fromSource, time.Since(buildStart).Round(time.Second))

	ref := image + ":" + version
	require.Contains(t, d.Run(t, "run", "--rm", "--network", "none", ref, "version"), "gpuscope, version "+version+" ")

	var inspect []struct {
		Size   int64
		Config struct {
			Entrypoint, Cmd []string
			ExposedPorts    map[string]struct{}
			Volumes         map[string]struct{}
		}
	}
	require.NoError(t, json.Unmarshal([]byte(d.Run(t, "image", "inspect", ref)), &inspect))
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
	// What seeing the host's containers by name takes: the host's pid and
	// cgroup namespaces (GPU processes' /proc/<pid>/cgroup, read as
	// cAdvisor's ids), the cgroups under /sys, the runtimes' sockets under
	// /var/run, and the host's root under /rootfs, through which cAdvisor
	// reads /proc and each Docker container's read-write layer id below
	// the daemon's data root (it drops a container whose id it cannot
	// read); /var/lib/docker is Docker's data root as a mount point of its
	// own, for the filesystem metrics.
	require.Equal(t, "host", svc.PID)
	require.Equal(t, "host", svc.Cgroup)
	for _, v := range []string{"/:/rootfs:ro", "/sys:/sys:ro", "/var/run:/var/run:ro", "/var/lib/docker:/var/lib/docker:ro"} {
		require.Contains(t, svc.Volumes, v)
	}
	// This daemon keeps its socket in its own directory, not in
	// /var/run (it must not meet a daemon the machine may run), so that
	// directory takes the place of the host's /var/run: inside,
	// /var/run/docker.sock is this daemon's socket, at the default
	// cadvisor.docker_endpoint, as a normal daemon's is with the README's
	// -v /var/run:/var/run:ro. (The socket alone cannot be mounted at
	// /var/run/docker.sock over the host's /var/run: runc cannot create the
	// mount point in that read-only bind.) Its data root needs no mount of
	// its own: cAdvisor reads it under /rootfs, wherever it is.
	require.Equal(t, "docker.sock", filepath.Base(d.Sock))
	runDir := filepath.Dir(d.Sock)
	port := pkgtest.FreePort(t)
	// opts are the docker run options of compose's gpuscope service.
	opts := []string{"--network", "host", "--pid", svc.PID, "--cgroupns", svc.Cgroup, "--uts", svc.UTS}
	for _, v := range svc.Volumes {
		src, rest, _ := strings.Cut(v, ":")
		if src == "/var/run" {
			v = runDir + ":" + rest
		}
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
		opts = append(opts, "-v", v)
	}
	args := append([]string{"run", "-d", "--name", "gpuscope-imagetest"}, opts...)
	args = append(args, ref,
		"serve", "--config.file=/etc/gpuscope/gpuscope.yml", "--storage.tsdb.path=/var/lib/gpuscope",
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(port))
	d.Run(t, args...)
	logsOnFailure(t, d, "gpuscope-imagetest")

	url := "http://127.0.0.1:" + strconv.Itoa(port)
	pkgtest.WaitReady(t, url, 90*time.Second, nil)
	t.Logf("image ready %s after start of test", time.Since(start).Round(time.Second))
	require.Contains(t, pkgtest.Get(t, url+"/api/v1/status/buildinfo"), `"version":"`+version+`"`)
	// cAdvisor reads the host's cgroups through the /sys mount: the root
	// cgroup is there, with its workload identity (a raw cgroup). Its name
	// and image labels are there too, empty, once a runtime names some
	// container.
	cadvisor := pkgtest.Get(t, url+"/metrics/cadvisor")
	require.True(t, hasSeries(cadvisor, `container_cpu_usage_seconds_total{cpu="total",id="/",`, []string{`runtime="cgroup"`, `workload="/"`}),
		"no container_cpu_usage_seconds_total of the root cgroup with runtime cgroup and workload /:\n%s", cadvisor)
	// --uts host: the node name, and so `instance`, is the host's name.
	host, err := os.Hostname()
	require.NoError(t, err)
	require.Contains(t, pkgtest.Get(t, url+"/"), host)

	// gpuscope in its container sees the other containers by name: one
	// started on the same daemon now, and its own; and joins a GPU process
	// to its container.
	seesContainersByName(t, d, url, ref, opts)

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
	d.Run(t, append([]string{"run", "--rm", "--network", "none", "-v", testVol + ":" + provPath, ref}, prov.Command...)...)
	cat := func(path string) string {
		return d.Run(t, "run", "--rm", "--network", "none", "-v", testVol+":"+grafanaPath+":ro", "--entrypoint", "cat", ref, path)
	}
	ds := cat(grafanaPath + "/datasources/gpuscope.yaml")
	for _, want := range []string{"type: prometheus", "uid: gpuscope", "url: http://gpuscope:9089", "timeInterval: 15s"} {
		require.Contains(t, ds, want)
	}
	provider := cat(grafanaPath + "/dashboards/gpuscope.yaml")
	require.Contains(t, provider, "path: "+grafanaPath+"/dashboards/gpuscope")
	list := d.Run(t, "run", "--rm", "--network", "none", "-v", testVol+":"+grafanaPath+":ro", "--entrypoint", "ls", ref, grafanaPath+"/dashboards/gpuscope")
	require.Contains(t, list, "gpuscope-gpu-overview.json")
	t.Logf("total %s", time.Since(start).Round(time.Second))
}

// logsOnFailure logs the output of container name if the test fails.
func logsOnFailure(t *testing.T, d *pkgtest.Dockerd, name string) {
	t.Cleanup(func() {
		if t.Failed() {
			// docker logs writes the container's stderr, where
			// gpuscope logs, to its own.
			stdout, stderr, _ := pkgtest.Cmd{Env: d.Env()}.Output(d.CLI, "logs", name)
			t.Logf("%s's output:\n%s%s", name, stdout, stderr)
		}
	})
}

// seesContainersByName starts a busybox container with a name on d and
// waits until the gpuscope at url reports it, and the gpuscope container
// itself (image gpuscopeImage), by name, runtime and image in cAdvisor's
// series. Then it runs the image again with the same docker run options
// (opts) and one simulated GPU whose process is the busybox container's,
// and waits for that GPU's use under the container's name: the pid join
// of a real GPU process, in the image.
func seesContainersByName(t *testing.T, d *pkgtest.Dockerd, url, gpuscopeImage string, opts []string) {
	t.Helper()
	const name = "imagetest-neighbour"
	img := d.BusyboxImage(t, "gpuscope-ci/busybox:1")
	started := time.Now()
	d.Run(t, "run", "-d", "--network", "none", "--name", name, img, "sleep", "3600")
	want := map[string][]string{
		name:                 {`name="` + name + `"`, `runtime="docker"`, `workload="` + name + `"`, `image="` + img + `"`},
		"gpuscope-imagetest": {`name="gpuscope-imagetest"`, `runtime="docker"`, `workload="gpuscope-imagetest"`, `image="` + gpuscopeImage + `"`},
	}
	var body string
	deadline := time.Now().Add(90 * time.Second)
	for {
		body = pkgtest.Get(t, url+"/metrics/cadvisor")
		missing := ""
		for who, labels := range want {
			if !hasSeries(body, "container_memory_working_set_bytes{", labels) || !hasSeries(body, "container_cpu_usage_seconds_total{", labels) {
				missing = who
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			var lines []string
			for _, l := range strings.Split(body, "\n") {
				if strings.HasPrefix(l, "container_memory_working_set_bytes{") {
					lines = append(lines, l)
				}
			}
			t.Fatalf("no series of container %s by name %v after %s; container_memory_working_set_bytes:\n%s",
				missing, want[missing], time.Since(started).Round(time.Second), strings.Join(lines, "\n"))
		}
		time.Sleep(time.Second)
	}
	t.Logf("containers seen by name %s after docker run", time.Since(started).Round(time.Second))

	// --pid host lets gpuscope read /proc/<pid>/cgroup of the host pid
	// docker inspect reports, and --cgroupns host makes that path
	// cAdvisor's id of the container. Its own TSDB path: the data volume
	// is the first gpuscope's.
	pid := d.Inspect(t, name, "{{.State.Pid}}")
	cfg := filepath.Join(t.TempDir(), "sim.yml")
	require.NoError(t, os.WriteFile(cfg, []byte("gpu:\n  backend: sim\n  sim:\n    count: 1\n    gpus: [{scenario: training, pid: "+pid+"}]\n"), 0o644))
	port := pkgtest.FreePort(t)
	args := append([]string{"run", "-d", "--name", "gpuscope-imagetest-sim"}, opts...)
	args = append(args, "-v", cfg+":/etc/gpuscope/sim.yml:ro", gpuscopeImage,
		"serve", "--config.file=/etc/gpuscope/sim.yml", "--storage.tsdb.path=/tmp/tsdb",
		"--web.listen-address=127.0.0.1:"+strconv.Itoa(port))
	d.Run(t, args...)
	logsOnFailure(t, d, "gpuscope-imagetest-sim")
	simURL := "http://127.0.0.1:" + strconv.Itoa(port)
	pkgtest.WaitReady(t, simURL, 90*time.Second, nil)
	labels := want[name]
	deadline = time.Now().Add(60 * time.Second)
	for {
		body = pkgtest.Get(t, simURL+"/metrics/gpu")
		if hasSeries(body, "gpuscope_gpu_container_memory_used_bytes{", labels) {
			break
		}
		if time.Now().After(deadline) {
			var lines []string
			for _, l := range strings.Split(body, "\n") {
				if strings.HasPrefix(l, "gpuscope_gpu_container_") || strings.HasPrefix(l, "gpuscope_gpu_collector_errors_total") {
					lines = append(lines, l)
				}
			}
			t.Fatalf("no gpuscope_gpu_container_memory_used_bytes with %v from the image; its per-container GPU series and read errors:\n%s", labels, strings.Join(lines, "\n"))
		}
		time.Sleep(time.Second)
	}
	t.Logf("GPU process (pid %s) joined to %s by the image", pid, name)
}

// hasSeries reports whether the exposition body has a line of the metric
// (name and opening brace) with every one of labels.
func hasSeries(body, metric string, labels []string) bool {
	for _, l := range strings.Split(body, "\n") {
		if !strings.HasPrefix(l, metric) {
			continue
		}
		all := true
		for _, lv := range labels {
			all = all && strings.Contains(l, lv)
		}
		if all {
			return true
		}
	}
	return false
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
