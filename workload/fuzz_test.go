package workload

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzResolve: whatever the path and metadata, Resolve does not panic and
// every label value is valid UTF-8, free of control characters and within
// its bound; the runtime is one of the six.
func FuzzResolve(f *testing.F) {
	for _, s := range []struct{ path, name, image, project, service, number, user string }{
		{path: "/system.slice/docker-" + id1 + ".scope", name: "llama-train", image: "llama:1"},
		{path: "/docker/" + id1, name: "app-web-2", project: "app", service: "web", number: "2"},
		{path: "/machine.slice/libpod-conmon-" + id1 + ".scope", name: "vllm"},
		{path: "/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + id1 + ".scope/container"},
		{path: "/kubepods.slice/kubepods-burstable.slice/cri-containerd-" + id1 + ".scope"},
		{path: "/default/redis"},
		{path: "/slurm/uid_1000/job_42/step_0/task_0", user: "alice"},
		{path: "/system.slice/node1_slurmstepd.scope/job_42/step_batch/user/task_0"},
		{path: "/system.slice/slurmstepd.scope/sEKNKTV3WPV500/step_0"},
		{path: "/user.slice/user-1000.slice/user@1000.service/app.slice/foo.service"},
		{path: "", name: "\xff\n\u2028" + strings.Repeat("🚀", 100)},
		{path: "/" + strings.Repeat("é", 300), image: strings.Repeat("\x85", 300)},
	} {
		f.Add(s.path, s.name, s.image, s.project, s.service, s.number, s.user)
	}
	f.Fuzz(func(t *testing.T, path, name, image, project, service, number, user string) {
		md := Metadata{Name: name, Image: image, User: user, Runtime: "docker", Labels: map[string]string{
			ComposeProjectLabel: project, ComposeServiceLabel: service, ComposeNumberLabel: number,
		}}
		for _, m := range []Metadata{md, {}} {
			id := Resolve(path, m)
			if id.Workload == "" || len(id.Workload) > MaxWorkloadBytes {
				t.Fatalf("workload %q: %d bytes", id.Workload, len(id.Workload))
			}
			switch id.Runtime {
			case RuntimeDocker, RuntimePodman, RuntimeContainerd, RuntimeSlurm, RuntimeSystemd, RuntimeCgroup:
			default:
				t.Fatalf("runtime %q", id.Runtime)
			}
			for i, v := range id.Values() {
				if !utf8.ValidString(v) || len(v) > MaxValueBytes {
					t.Fatalf("%s=%q: invalid or %d bytes", LabelNames()[i], v, len(v))
				}
				for _, r := range v {
					if r < 0x20 || (r >= 0x7f && r < 0xa0) || r == 0x2028 || r == 0x2029 {
						t.Fatalf("%s=%q has control character %U", LabelNames()[i], v, r)
					}
				}
			}
		}
	})
}
