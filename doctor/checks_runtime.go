package doctor

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/gpuscope/gpuscope/scrape/cadvisor"
)

// runtimeChecks: each container runtime's socket, probed as cAdvisor's
// start probes it (cadvisor.ProbeRuntime), and Slurm's cgroups.
func runtimeChecks(ctx context.Context, o *Options) []Check {
	cfg := o.Config.Cadvisor
	if !cfg.Enabled {
		return []Check{ok("runtimes", "cAdvisor off (cadvisor.enabled: false): no container metrics")}
	}
	ctx, cancel := context.WithTimeout(ctx, o.Timeout)
	defer cancel()
	rts := []struct {
		name, key, endpoint string
		binaries            []string
		start               string
		probe               func(context.Context, string) error
	}{
		{"docker", "docker_endpoint", cfg.DockerEndpoint, []string{"dockerd"}, "systemctl start docker", cadvisor.ProbeRuntime},
		{"podman", "podman_endpoint", cfg.PodmanEndpoint, []string{"podman"}, "systemctl enable --now podman.socket", cadvisor.ProbeRuntime},
		{"containerd", "containerd_endpoint", cfg.ContainerdEndpoint, []string{"containerd"}, "systemctl start containerd", dialSocket},
	}
	checks := make([]Check, len(rts))
	done := make(chan struct{}, len(rts))
	for i, rt := range rts {
		go func() {
			defer func() { done <- struct{}{} }()
			if rt.endpoint == "" {
				checks[i] = ok(rt.name, fmt.Sprintf("off (cadvisor.%s is empty): its containers are measured as raw cgroups", rt.key))
				return
			}
			installed := ""
			for _, b := range rt.binaries {
				if p, err := o.LookPath(b); err == nil {
					installed = p
					break
				}
			}
			checks[i] = runtimeCheck(rt.name, rt.key, rt.endpoint, installed, rt.start, rt.probe(ctx, rt.endpoint))
		}()
	}
	for range rts {
		<-done
	}
	return append(checks, slurmCheck(o))
}

// runtimeCheck words a probe's result. installed is the runtime's binary
// when one is on the PATH.
func runtimeCheck(name, key, endpoint, installed, start string, err error) Check {
	raw := "its containers are measured as raw cgroups (no name, image or compose labels)"
	switch {
	case err == nil:
		return ok(name, "answers at "+endpoint)
	case errors.Is(err, fs.ErrNotExist):
		if installed == "" {
			return ok(name, "not installed (no socket at "+endpoint+")")
		}
		return warn(name, fmt.Sprintf("%s is installed but %s does not exist: %s", installed, endpoint, raw),
			fmt.Sprintf("start it (%s); in a container mount the host's /var/run (-v /var/run:/var/run:ro); or set cadvisor.%s", start, key))
	case errors.Is(err, fs.ErrPermission):
		return warn(name, fmt.Sprintf("%s: permission denied: %s", endpoint, raw),
			"run gpuscope as root, or give its user access to the socket (e.g. the docker group)")
	case errors.Is(err, syscall.ECONNREFUSED):
		return warn(name, fmt.Sprintf("%s refuses connections (the daemon is stopped): %s", endpoint, raw),
			fmt.Sprintf("start it (%s), then restart gpuscope: the runtime is probed once at start", start))
	case errors.Is(err, cadvisor.ErrNotAnswering):
		return warn(name, fmt.Sprintf("%s accepts connections but does not answer: %s", endpoint, raw),
			"the daemon is hung: restart it, then gpuscope")
	}
	return warn(name, fmt.Sprintf("%s: %v: %s", endpoint, err, raw), "check cadvisor."+key+" in the config")
}

// dialSocket checks that containerd's gRPC socket accepts connections;
// cAdvisor's containerd factory does the talking.
func dialSocket(ctx context.Context, endpoint string) error {
	path := strings.TrimPrefix(endpoint, "unix://")
	conn, err := (&net.Dialer{}).DialContext(ctx, "unix", path)
	if err != nil {
		var op *net.OpError
		if errors.As(err, &op) {
			return op.Err
		}
		return err
	}
	return conn.Close()
}

// slurmCheck looks for slurmd and the cgroups Slurm's cgroup plugins make
// (the layouts workload.Slurm resolves).
func slurmCheck(o *Options) Check {
	var found []string
	for _, pattern := range []string{
		"cpu/slurm*", "cpu,cpuacct/slurm*", "memory/slurm*", // v1: <controller>/<CgroupPrepend>
		"slurmstepd.scope", "*_slurmstepd.scope", "*.slice/slurmstepd.scope", "*.slice/*_slurmstepd.scope", // v2
	} {
		m, _ := filepath.Glob(filepath.Join(o.CgroupRoot, pattern))
		found = append(found, m...)
	}
	slurmd, err := o.LookPath("slurmd")
	switch {
	case len(found) > 0:
		return ok("slurm", "Slurm cgroups at "+found[0]+": jobs are workloads (slurm_job_id, slurm_step, slurm_user)")
	case err == nil:
		return ok("slurm", slurmd+" installed, no Slurm job cgroup now: jobs appear as workloads once they run under proctrack/cgroup or task/cgroup")
	}
	return ok("slurm", "not installed")
}
