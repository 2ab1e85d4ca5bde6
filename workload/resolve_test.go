package workload

import (
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// Container ids as Docker, Podman and containerd print them.
const (
	id1 = "3f2a8c1d5e6b7a8f9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b"
	id2 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

func compose(project, service, number string) map[string]string {
	m := map[string]string{
		ComposeProjectLabel:          project,
		ComposeServiceLabel:          service,
		"com.docker.compose.version": "2.26.1",
	}
	if number != "" {
		m[ComposeNumberLabel] = number
	}
	return m
}

func TestResolve(t *testing.T) {
	llama := Metadata{Name: "llama-train", Image: "ghcr.io/acme/llama:3.1", Runtime: "docker"}
	web := Metadata{Name: "app-web-1", Image: "nginx:1.27", Labels: compose("app", "web", "1"), Runtime: "docker"}

	for _, tc := range []struct {
		name string
		path string
		md   Metadata
		want Identity
	}{
		// Docker.
		{
			name: "docker systemd driver (cgroup v1 and v2)",
			path: "/system.slice/docker-" + id1 + ".scope",
			md:   llama,
			want: Identity{Workload: "llama-train", Runtime: "docker", Image: "ghcr.io/acme/llama:3.1"},
		},
		{
			name: "docker cgroupfs driver (cgroup v1 and v2)",
			path: "/docker/" + id1,
			md:   llama,
			want: Identity{Workload: "llama-train", Runtime: "docker", Image: "ghcr.io/acme/llama:3.1"},
		},
		{
			name: "docker rootless, systemd driver",
			path: "/user.slice/user-1000.slice/user@1000.service/user.slice/docker-" + id1 + ".scope",
			md:   llama,
			want: Identity{Workload: "llama-train", Runtime: "docker", Image: "ghcr.io/acme/llama:3.1", User: "1000"},
		},
		{
			name: "docker without a socket: short id",
			path: "/system.slice/docker-" + id1 + ".scope",
			want: Identity{Workload: "docker-3f2a8c1d5e6b", Runtime: "docker"},
		},
		{
			name: "docker cgroupfs without a socket",
			path: "/docker/" + id1,
			want: Identity{Workload: "docker-3f2a8c1d5e6b", Runtime: "docker"},
		},
		{
			name: "docker in docker: the inner container",
			path: "/docker/" + id1 + "/docker/" + id2,
			want: Identity{Workload: "docker-0123456789ab", Runtime: "docker"},
		},
		{
			name: "docker custom cgroup parent, known to cAdvisor's docker handler",
			path: "/gpu-jobs/" + id1,
			md:   llama,
			want: Identity{Workload: "llama-train", Runtime: "docker", Image: "ghcr.io/acme/llama:3.1"},
		},
		{
			name: "docker under kubepods, known to cAdvisor's docker handler",
			path: "/kubepods/burstable/pod6f1c6f2e-9d0b-4c1e-8d5a-2b7e1c3d4f5a/" + id1,
			md:   llama,
			want: Identity{Workload: "llama-train", Runtime: "docker", Image: "ghcr.io/acme/llama:3.1"},
		},
		{
			name: "compose service, first replica",
			path: "/system.slice/docker-" + id1 + ".scope",
			md:   web,
			want: Identity{Workload: "app/web", Runtime: "docker", Image: "nginx:1.27", ComposeProject: "app", ComposeService: "web"},
		},
		{
			name: "compose service, third replica",
			path: "/docker/" + id2,
			md:   Metadata{Name: "app-web-3", Image: "nginx:1.27", Labels: compose("app", "web", "3")},
			want: Identity{Workload: "app/web-3", Runtime: "docker", Image: "nginx:1.27", ComposeProject: "app", ComposeService: "web"},
		},
		{
			name: "compose without a container number",
			path: "/docker/" + id2,
			md:   Metadata{Name: "app_web_1", Labels: compose("app", "web", "")},
			want: Identity{Workload: "app/web", Runtime: "docker", ComposeProject: "app", ComposeService: "web"},
		},
		{
			name: "compose with a bad container number",
			path: "/docker/" + id2,
			md:   Metadata{Name: "app-web-x", Labels: compose("app", "web", "x")},
			want: Identity{Workload: "app/web", Runtime: "docker", ComposeProject: "app", ComposeService: "web"},
		},
		{
			name: "compose one-off container keeps its name",
			path: "/docker/" + id2,
			md: Metadata{Name: "app-web-run-5d1c0e2f", Labels: func() map[string]string {
				m := compose("app", "web", "1")
				m[ComposeOneoffLabel] = "True"
				return m
			}()},
			want: Identity{Workload: "app-web-run-5d1c0e2f", Runtime: "docker", ComposeProject: "app", ComposeService: "web"},
		},
		{
			name: "compose project without service is no compose",
			path: "/docker/" + id2,
			md:   Metadata{Name: "lonely", Labels: map[string]string{ComposeProjectLabel: "app"}},
			want: Identity{Workload: "lonely", Runtime: "docker"},
		},
		{
			name: "docker's own service is a systemd unit",
			path: "/system.slice/docker.service",
			want: Identity{Workload: "docker.service", Runtime: "systemd"},
		},
		{
			name: "a container's shm mount unit is not the container",
			path: "/system.slice/var-lib-docker-containers-" + id1 + "-mounts-shm.mount",
			md:   Metadata{Runtime: "docker"},
			want: Identity{Workload: "var-lib-docker-containers-" + id1 + "-mounts-shm.mount", Runtime: "systemd"},
		},
		{
			name: "short hex is not docker",
			path: "/system.slice/docker-3f2a8c1d5e6b.scope",
			want: Identity{Workload: "docker-3f2a8c1d5e6b.scope", Runtime: "systemd"},
		},
		{
			name: "upper-case hex is not docker",
			path: "/system.slice/docker-" + strings.ToUpper(id1) + ".scope",
			want: Identity{Workload: "docker-" + strings.ToUpper(id1) + ".scope", Runtime: "systemd"},
		},
		{
			name: "63 hex under /docker is not docker",
			path: "/docker/" + id1[:63],
			want: Identity{Workload: "/docker/" + id1[:63], Runtime: "cgroup"},
		},
		{
			name: "65 hex under /docker is not docker",
			path: "/docker/" + id1 + "0",
			want: Identity{Workload: "/docker/" + id1 + "0", Runtime: "cgroup"},
		},
		{
			name: "docker's parent cgroup",
			path: "/docker",
			want: Identity{Workload: "/docker", Runtime: "cgroup"},
		},

		// Podman.
		{
			name: "podman rootful, systemd driver",
			path: "/machine.slice/libpod-" + id1 + ".scope",
			md:   Metadata{Name: "vllm", Image: "docker.io/vllm/vllm-openai:v0.6.3", Runtime: "podman"},
			want: Identity{Workload: "vllm", Runtime: "podman", Image: "docker.io/vllm/vllm-openai:v0.6.3"},
		},
		{
			name: "podman --cgroups=split",
			path: "/machine.slice/libpod-" + id1 + ".scope/container",
			md:   Metadata{Name: "vllm"},
			want: Identity{Workload: "vllm", Runtime: "podman"},
		},
		{
			name: "podman rootless",
			path: "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + id1 + ".scope/container",
			md:   Metadata{Name: "notebook"},
			want: Identity{Workload: "notebook", Runtime: "podman", User: "1000"},
		},
		{
			name: "podman rootless without split",
			path: "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + id1 + ".scope",
			want: Identity{Workload: "podman-3f2a8c1d5e6b", Runtime: "podman", User: "1000"},
		},
		{
			name: "podman rootless conmon, the service manager's uid wins",
			path: "/user.slice/user-1000.slice/user@1001.service/user.slice/libpod-conmon-" + id1 + ".scope",
			want: Identity{Workload: "podman-3f2a8c1d5e6b/conmon", Runtime: "podman", User: "1001"},
		},
		{
			name: "podman cgroupfs driver",
			path: "/libpod_parent/libpod-" + id1,
			md:   Metadata{Name: "vllm"},
			want: Identity{Workload: "vllm", Runtime: "podman"},
		},
		{
			name: "podman conmon",
			path: "/machine.slice/libpod-conmon-" + id1 + ".scope",
			md:   Metadata{Name: "vllm"},
			want: Identity{Workload: "vllm/conmon", Runtime: "podman"},
		},
		{
			name: "podman conmon without a socket",
			path: "/machine.slice/libpod-conmon-" + id1 + ".scope",
			want: Identity{Workload: "podman-3f2a8c1d5e6b/conmon", Runtime: "podman"},
		},
		{
			name: "podman-compose sets compose's labels",
			path: "/machine.slice/libpod-" + id2 + ".scope",
			md:   Metadata{Name: "app_db_1", Labels: compose("app", "db", "1")},
			want: Identity{Workload: "app/db", Runtime: "podman", ComposeProject: "app", ComposeService: "db"},
		},
		{
			name: "podman's shared cgroupfs conmon cgroup",
			path: "/libpod_parent/conmon",
			want: Identity{Workload: "/libpod_parent/conmon", Runtime: "cgroup"},
		},
		{
			name: "podman under a custom parent, known to cAdvisor's podman handler",
			path: "/custom.slice/ctr-" + id1 + ".scope",
			md:   Metadata{Name: "vllm", Runtime: "podman"},
			want: Identity{Workload: "vllm", Runtime: "podman"},
		},

		// containerd.
		{
			name: "containerd CRI, systemd driver",
			path: "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice/cri-containerd-" + id1 + ".scope",
			want: Identity{Workload: "containerd-3f2a8c1d5e6b", Runtime: "containerd"},
		},
		{
			name: "nerdctl, systemd driver",
			path: "/system.slice/nerdctl-" + id1 + ".scope",
			md:   Metadata{Name: "trainer", Image: "docker.io/library/python:3.12"},
			want: Identity{Workload: "trainer", Runtime: "containerd", Image: "docker.io/library/python:3.12"},
		},
		{
			name: "containerd cgroupfs, k8s.io namespace",
			path: "/k8s.io/" + id1,
			want: Identity{Workload: "containerd-3f2a8c1d5e6b", Runtime: "containerd"},
		},
		{
			name: "containerd cgroupfs, named container from ctr",
			path: "/default/redis",
			want: Identity{Workload: "default/redis", Runtime: "containerd"},
		},
		{
			name: "containerd cgroupfs, default namespace",
			path: "/default/" + id2,
			md:   Metadata{Name: "trainer"},
			want: Identity{Workload: "trainer", Runtime: "containerd"},
		},
		{
			name: "an id under another top-level dir without metadata: the path",
			path: "/gpu-jobs/" + id1,
			want: Identity{Workload: "/gpu-jobs/" + id1, Runtime: "cgroup"},
		},
		{
			name: "containerd under another namespace, known to cAdvisor",
			path: "/buildkit/" + id1,
			md:   Metadata{Runtime: "containerd"},
			want: Identity{Workload: "containerd-3f2a8c1d5e6b", Runtime: "containerd"},
		},
		{
			name: "a bad containerd name",
			path: "/default/-redis",
			want: Identity{Workload: "/default/-redis", Runtime: "cgroup"},
		},
		{
			name: "a named cgroup in another top-level dir is no containerd",
			path: "/custom/redis",
			want: Identity{Workload: "/custom/redis", Runtime: "cgroup"},
		},
		{
			name: "containerd's own service is a systemd unit",
			path: "/system.slice/containerd.service",
			want: Identity{Workload: "containerd.service", Runtime: "systemd"},
		},
		{
			name: "a kubepods pod slice is a systemd unit",
			path: "/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice",
			want: Identity{Workload: "kubepods-besteffort-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice", Runtime: "systemd"},
		},
		{
			name: "kubepods cgroupfs without metadata: the path",
			path: "/kubepods/besteffort/pod0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0/" + id1,
			want: Identity{Workload: "/kubepods/besteffort/pod0f1e2d3c-4b5a-6978-8796-a5b4c3d2e1f0/" + id1, Runtime: "cgroup"},
		},

		// Slurm, cgroup v1.
		{
			name: "slurm v1 task",
			path: "/slurm/uid_1000/job_42/step_0/task_0",
			want: Identity{Workload: "job 42.0/task_0", Runtime: "slurm", SlurmJob: "42", SlurmStep: "0", SlurmUser: "1000", User: "1000"},
		},
		{
			name: "slurm v1 step",
			path: "/slurm/uid_1000/job_42/step_0",
			want: Identity{Workload: "job 42.0", Runtime: "slurm", SlurmJob: "42", SlurmStep: "0", SlurmUser: "1000", User: "1000"},
		},
		{
			name: "slurm v1 batch step",
			path: "/slurm/uid_1000/job_42/step_batch",
			want: Identity{Workload: "job 42.batch", Runtime: "slurm", SlurmJob: "42", SlurmStep: "batch", SlurmUser: "1000", User: "1000"},
		},
		{
			name: "slurm v1 extern step",
			path: "/slurm/uid_1000/job_42/step_extern",
			want: Identity{Workload: "job 42.extern", Runtime: "slurm", SlurmJob: "42", SlurmStep: "extern", SlurmUser: "1000", User: "1000"},
		},
		{
			name: "slurm v1 job",
			path: "/slurm/uid_1000/job_42",
			want: Identity{Workload: "job 42", Runtime: "slurm", SlurmJob: "42", SlurmUser: "1000", User: "1000"},
		},
		{
			name: "slurm v1 user",
			path: "/slurm/uid_1000",
			want: Identity{Workload: "user 1000", Runtime: "slurm", SlurmUser: "1000", User: "1000"},
		},
		{
			name: "slurm v1 user name from metadata",
			path: "/slurm/uid_1000/job_42/step_0",
			md:   Metadata{User: "alice"},
			want: Identity{Workload: "job 42.0", Runtime: "slurm", SlurmJob: "42", SlurmStep: "0", SlurmUser: "alice", User: "alice"},
		},
		{
			name: "slurm v1 multiple slurmd, interactive step",
			path: "/slurm_node1/uid_0/job_7/step_interactive",
			want: Identity{Workload: "job 7.interactive", Runtime: "slurm", SlurmJob: "7", SlurmStep: "interactive", SlurmUser: "0", User: "0"},
		},
		{
			name: "slurm v1 heterogeneous step",
			path: "/slurm/uid_1000/job_43/step_0+1/task_2",
			want: Identity{Workload: "job 43.0+1/task_2", Runtime: "slurm", SlurmJob: "43", SlurmStep: "0+1", SlurmUser: "1000", User: "1000"},
		},
		{
			name: "slurm v1 custom CgroupPrepend",
			path: "/hpc/uid_1000/job_42/step_1",
			want: Identity{Workload: "job 42.1", Runtime: "slurm", SlurmJob: "42", SlurmStep: "1", SlurmUser: "1000", User: "1000"},
		},
		{
			name: "slurm v1 root is no workload",
			path: "/slurm",
			want: Identity{Workload: "/slurm", Runtime: "cgroup"},
		},
		{
			name: "a uid directory outside slurm without a job",
			path: "/foo/uid_1000",
			want: Identity{Workload: "/foo/uid_1000", Runtime: "cgroup"},
		},

		// Slurm, cgroup v2.
		{
			name: "slurm v2 task",
			path: "/system.slice/slurmstepd.scope/job_42/step_0/user/task_0",
			want: Identity{Workload: "job 42.0/user/task_0", Runtime: "slurm", SlurmJob: "42", SlurmStep: "0"},
		},
		{
			name: "slurm v2 step",
			path: "/system.slice/slurmstepd.scope/job_42/step_0",
			want: Identity{Workload: "job 42.0", Runtime: "slurm", SlurmJob: "42", SlurmStep: "0"},
		},
		{
			name: "slurm v2 step's slurmstepd, multiple slurmd",
			path: "/system.slice/node1_slurmstepd.scope/job_42/step_batch/slurm",
			want: Identity{Workload: "job 42.batch/slurm", Runtime: "slurm", SlurmJob: "42", SlurmStep: "batch"},
		},
		{
			name: "slurm v2 job, user from metadata",
			path: "/system.slice/node1_slurmstepd.scope/job_42",
			md:   Metadata{User: "alice"},
			want: Identity{Workload: "job 42", Runtime: "slurm", SlurmJob: "42", SlurmUser: "alice", User: "alice"},
		},
		{
			name: "slurm v2 extern step, custom slice",
			path: "/slurm.slice/slurmstepd.scope/job_9001/step_extern/user/task_special",
			want: Identity{Workload: "job 9001.extern/user/task_special", Runtime: "slurm", SlurmJob: "9001", SlurmStep: "extern"},
		},
		{
			name: "slurm v2 job named by SLUID (26.05)",
			path: "/system.slice/slurmstepd.scope/sEKNKTV3WPV500/step_0/user/task_0",
			want: Identity{Workload: "job sEKNKTV3WPV500.0/user/task_0", Runtime: "slurm", SlurmJob: "sEKNKTV3WPV500", SlurmStep: "0"},
		},
		{
			name: "slurm v2 odd step directory",
			path: "/system.slice/slurmstepd.scope/job_42/step_x",
			want: Identity{Workload: "job 42/step_x", Runtime: "slurm", SlurmJob: "42"},
		},
		{
			name: "slurm v2 stepd scope is a systemd unit",
			path: "/system.slice/slurmstepd.scope",
			want: Identity{Workload: "slurmstepd.scope", Runtime: "systemd"},
		},
		{
			name: "slurm v2 system directory",
			path: "/system.slice/slurmstepd.scope/system",
			want: Identity{Workload: "/system.slice/slurmstepd.scope/system", Runtime: "cgroup"},
		},
		{
			name: "slurm v2 bad job id",
			path: "/system.slice/slurmstepd.scope/job_4x2",
			want: Identity{Workload: "/system.slice/slurmstepd.scope/job_4x2", Runtime: "cgroup"},
		},
		{
			name: "slurm v2 job id past uint32 digits",
			path: "/system.slice/slurmstepd.scope/job_12345678901",
			want: Identity{Workload: "/system.slice/slurmstepd.scope/job_12345678901", Runtime: "cgroup"},
		},
		{
			name: "SLUID with a letter Crockford's base32 leaves out",
			path: "/system.slice/slurmstepd.scope/sEKNKTV3WPV50U",
			want: Identity{Workload: "/system.slice/slurmstepd.scope/sEKNKTV3WPV50U", Runtime: "cgroup"},
		},
		{
			name: "slurmd is a systemd unit",
			path: "/system.slice/slurmd.service",
			want: Identity{Workload: "slurmd.service", Runtime: "systemd"},
		},

		// systemd.
		{
			name: "system service",
			path: "/system.slice/nginx.service",
			want: Identity{Workload: "nginx.service", Runtime: "systemd"},
		},
		{
			name: "template instance in a nested slice",
			path: "/system.slice/system-getty.slice/getty@tty1.service",
			want: Identity{Workload: "getty@tty1.service", Runtime: "systemd"},
		},
		{
			name: "escaped unit name",
			path: `/system.slice/system-systemd\x2dfsck.slice`,
			want: Identity{Workload: `system-systemd\x2dfsck.slice`, Runtime: "systemd"},
		},
		{
			name: "login session: the user, then the scope without .scope",
			path: "/user.slice/user-1000.slice/session-3.scope",
			want: Identity{Workload: "1000: session-3", Runtime: "systemd", User: "1000"},
		},
		{
			name: "a user's slice",
			path: "/user.slice/user-1000.slice",
			want: Identity{Workload: "1000: user-1000.slice", Runtime: "systemd", User: "1000"},
		},
		{
			name: "user manager",
			path: "/user.slice/user-1000.slice/user@1000.service",
			want: Identity{Workload: "1000: user@1000.service", Runtime: "systemd", User: "1000"},
		},
		{
			name: "user service, not the system's jupyter.service",
			path: "/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service",
			want: Identity{Workload: "1000: jupyter.service", Runtime: "systemd", User: "1000"},
		},
		{
			name: "systemd-run --user --scope",
			path: "/user.slice/user-1000.slice/user@1000.service/app.slice/run-u42.scope",
			want: Identity{Workload: "1000: run-u42", Runtime: "systemd", User: "1000"},
		},
		{
			name: "root's session",
			path: "/user.slice/user-0.slice/session-c1.scope",
			want: Identity{Workload: "0: session-c1", Runtime: "systemd", User: "0"},
		},
		{
			name: "a uid past 32 bits' digits is no user",
			path: "/user.slice/user-12345678901.slice/session-3.scope",
			want: Identity{Workload: "session-3.scope", Runtime: "systemd"},
		},
		{
			name: "user.slice itself has no user",
			path: "/user.slice",
			want: Identity{Workload: "user.slice", Runtime: "systemd"},
		},
		{
			name: "a delegated child of a user service is a raw cgroup, still the user's",
			path: "/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service/kernel",
			want: Identity{Workload: "/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service/kernel", Runtime: "cgroup", User: "1000"},
		},
		{
			name: "init scope",
			path: "/init.scope",
			want: Identity{Workload: "init.scope", Runtime: "systemd"},
		},
		{
			name: "a slice",
			path: "/system.slice",
			want: Identity{Workload: "system.slice", Runtime: "systemd"},
		},
		{
			name: "not a unit type with a cgroup",
			path: "/system.slice/foo.timer",
			want: Identity{Workload: "/system.slice/foo.timer", Runtime: "cgroup"},
		},
		{
			name: "a delegated child of a service",
			path: "/system.slice/foo.service/worker",
			want: Identity{Workload: "/system.slice/foo.service/worker", Runtime: "cgroup"},
		},
		{
			name: "a unit name with a space is none",
			path: "/system.slice/my app.service",
			want: Identity{Workload: "/system.slice/my app.service", Runtime: "cgroup"},
		},

		// Raw cgroups.
		{name: "root", path: "/", want: Identity{Workload: "/", Runtime: "cgroup"}},
		{name: "empty path is the root", path: "", want: Identity{Workload: "/", Runtime: "cgroup"}},
		{name: "unknown layout", path: "/gpu-burn/run-7", want: Identity{Workload: "/gpu-burn/run-7", Runtime: "cgroup"}},
		{
			name: "metadata without a runtime layout keeps the path",
			path: "/gpu-burn/run-7",
			md:   Metadata{Name: "ignored", Image: "img:1"},
			want: Identity{Workload: "/gpu-burn/run-7", Runtime: "cgroup", Image: "img:1"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Resolve(tc.path, tc.md)
			require.Equal(t, tc.want, got)
			requireSafe(t, got)
		})
	}
}

func TestResolveBadInput(t *testing.T) {
	long := strings.Repeat("ä", 200) // 400 bytes, 2 per rune
	for _, tc := range []struct {
		name string
		path string
		md   Metadata
		want Identity
	}{
		{
			name: "quotes and backslashes are kept",
			path: "/docker/" + id1,
			md:   Metadata{Name: `my"app\'s`},
			want: Identity{Workload: `my"app\'s`, Runtime: "docker"},
		},
		{
			name: "newlines and tabs become spaces",
			path: "/docker/" + id1,
			md:   Metadata{Name: "evil\nname\r\tx", Image: "img\n# HELP fake"},
			want: Identity{Workload: "evil name  x", Runtime: "docker", Image: "img # HELP fake"},
		},
		{
			name: "unicode is kept, line separators are not",
			path: "/docker/" + id1,
			md:   Metadata{Name: "训练-🚀\u2028x"},
			want: Identity{Workload: "训练-🚀 x", Runtime: "docker"},
		},
		{
			// Not U+FFFD, which PromQL cannot select (FuzzResolve).
			name: "invalid UTF-8 becomes \\xNN",
			path: "/docker/" + id1,
			md:   Metadata{Name: "a\xffb\xc3"},
			want: Identity{Workload: `a\xffb\xc3`, Runtime: "docker"},
		},
		{
			name: "C1 controls and DEL become spaces",
			path: "/docker/" + id1,
			md:   Metadata{Name: "a\u0085b\x7fc"},
			want: Identity{Workload: "a b c", Runtime: "docker"},
		},
		{
			name: "a long name is cut at a rune boundary",
			path: "/docker/" + id1,
			md:   Metadata{Name: "x" + long},
			// 1 + 62*2 = 125 bytes, then "…".
			want: Identity{Workload: "x" + strings.Repeat("ä", 62) + "…", Runtime: "docker"},
		},
		{
			name: "compose labels are cleaned too",
			path: "/docker/" + id1,
			md:   Metadata{Labels: compose("p\nq", "s\x00", "2")},
			want: Identity{Workload: "p q/s -2", Runtime: "docker", ComposeProject: "p q", ComposeService: "s "},
		},
		{
			name: "a long image is cut at 256 bytes",
			path: "/docker/" + id1,
			md:   Metadata{Name: "n", Image: strings.Repeat("i", 300)},
			want: Identity{Workload: "n", Runtime: "docker", Image: strings.Repeat("i", 253) + "…"},
		},
		{
			name: "a long path keeps its tail",
			path: "/" + strings.Repeat("a", 200) + "/leaf",
			want: Identity{Workload: "…" + strings.Repeat("a", 120) + "/leaf", Runtime: "cgroup"},
		},
		{
			name: "a path with a newline",
			path: "/weird\ncgroup",
			want: Identity{Workload: "/weird cgroup", Runtime: "cgroup"},
		},
		{
			name: "a long multi-byte path is cut at a rune boundary",
			path: "/" + long,
			// 125 bytes of tail would start inside a rune: 124 bytes.
			want: Identity{Workload: "…" + strings.Repeat("ä", 62), Runtime: "cgroup"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Resolve(tc.path, tc.md)
			require.Equal(t, tc.want, got)
			requireSafe(t, got)
		})
	}
}

// requireSafe checks what every identity must be: valid UTF-8, no control
// characters, within the bounds, workload and runtime set.
func requireSafe(t testing.TB, id Identity) {
	t.Helper()
	require.NotEmpty(t, id.Workload)
	require.Contains(t, []string{"docker", "podman", "containerd", "slurm", "systemd", "cgroup"}, id.Runtime)
	require.LessOrEqual(t, len(id.Workload), MaxWorkloadBytes)
	for i, v := range id.Values() {
		require.True(t, utf8.ValidString(v), "label %s=%q", LabelNames()[i], v)
		require.LessOrEqual(t, len(v), MaxValueBytes)
		for _, r := range v {
			require.False(t, r < 0x20 || (r >= 0x7f && r < 0xa0) || r == 0x2028 || r == 0x2029,
				"label %s=%q has a control character", LabelNames()[i], v)
		}
	}
}

type fixed struct {
	runtime, prefix string
}

func (f fixed) Runtime() string { return f.runtime }

func (f fixed) Resolve(path string, _ Metadata) (Identity, bool) {
	if !strings.HasPrefix(path, f.prefix) {
		return Identity{}, false
	}
	return Identity{Workload: f.runtime + ":" + path, Runtime: f.runtime}, true
}

func TestResolveWithOrder(t *testing.T) {
	rs := []Resolver{fixed{"docker", "/a"}, fixed{"podman", "/a/b"}, fixed{"bad\nruntime", "/z"}}
	require.Equal(t, Identity{Workload: "docker:/a/b", Runtime: "docker"}, ResolveWith(rs, "/a/b", Metadata{}),
		"the first match wins")
	require.Equal(t, Identity{Workload: "/c", Runtime: "cgroup"}, ResolveWith(rs, "/c", Metadata{}),
		"the raw path is last")
	require.Equal(t, Identity{Workload: "/system.slice/nginx.service", Runtime: "cgroup"},
		ResolveWith([]Resolver{}, "/system.slice/nginx.service", Metadata{}),
		"an empty list leaves only the raw path")
	require.Equal(t, Identity{Workload: "bad runtime:/z", Runtime: "bad runtime"},
		ResolveWith(rs, "/z", Metadata{}), "a resolver's values are cleaned too")

	// DefaultResolvers through the interface gives what Resolve gives.
	for _, p := range []string{
		"/system.slice/docker-" + id1 + ".scope", "/machine.slice/libpod-" + id1 + ".scope",
		"/k8s.io/" + id1, "/slurm/uid_1/job_2/step_3", "/init.scope", "/x",
	} {
		require.Equal(t, Resolve(p, Metadata{}), ResolveWith(DefaultResolvers(), p, Metadata{}), p)
	}
	names := []string{}
	for _, r := range DefaultResolvers() {
		names = append(names, r.Runtime())
	}
	require.Equal(t, []string{"docker", "podman", "containerd", "slurm", "systemd"}, names)
}

func TestLabels(t *testing.T) {
	id := Identity{Workload: "job 42.0", Runtime: "slurm", SlurmJob: "42", SlurmStep: "0", SlurmUser: "1000", User: "1000"}
	require.Equal(t, []Label{
		{"workload", "job 42.0"}, {"runtime", "slurm"},
		{"slurm_job_id", "42"}, {"slurm_step", "0"}, {"slurm_user", "1000"}, {"user", "1000"},
	}, id.Labels())
	require.Equal(t, []string{
		"workload", "runtime", "image", "compose_project", "compose_service",
		"slurm_job_id", "slurm_step", "slurm_user", "user",
	}, LabelNames())
	require.Equal(t, []string{"job 42.0", "slurm", "", "", "", "42", "0", "1000", "1000"}, id.Values())

	m := map[string]string{"id": "/docker/" + id1, "name": "app-web-1", "image": "nginx:1.27"}
	Identity{Workload: "app/web", Runtime: "docker", Image: "nginx:1.27", ComposeProject: "app", ComposeService: "web"}.AddTo(m)
	require.Equal(t, map[string]string{
		"id": "/docker/" + id1, "name": "app-web-1", "image": "nginx:1.27",
		"workload": "app/web", "runtime": "docker", "compose_project": "app", "compose_service": "web",
	}, m)

	names := LabelNames()
	names[0] = "changed"
	require.Equal(t, "workload", LabelNames()[0], "LabelNames returns a copy")
}
