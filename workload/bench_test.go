package workload

import (
	"fmt"
	"testing"
)

var benchPaths = []struct{ name, path string }{
	{"docker", "/system.slice/docker-" + id1 + ".scope"},
	{"docker_cgroupfs", "/docker/" + id1},
	{"podman", "/machine.slice/libpod-" + id1 + ".scope"},
	{"containerd", "/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod0f1e2d3c_4b5a_6978_8796_a5b4c3d2e1f0.slice/cri-containerd-" + id1 + ".scope"},
	{"slurm_v1", "/slurm/uid_1000/job_42/step_0/task_0"},
	{"slurm_v2", "/system.slice/slurmstepd.scope/job_42/step_0/user/task_0"},
	{"systemd", "/system.slice/nginx.service"},
	{"cgroup", "/gpu-burn/run-7"},
}

var benchMD = Metadata{Name: "app-web-1", Image: "nginx:1.27", Labels: compose("app", "web", "1"), Runtime: "docker"}

// BenchmarkResolve is the cost of computing one cgroup's identity, paid
// once per cgroup with a Cache.
func BenchmarkResolve(b *testing.B) {
	for _, p := range benchPaths {
		b.Run(p.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				Resolve(p.path, benchMD)
			}
		})
	}
}

// BenchmarkCacheGet is the cost per cgroup and scrape: a hit with the
// metadata cAdvisor passes, a hit with none (the GPU side), and hits from
// all CPUs at once over 1000 cgroups.
func BenchmarkCacheGet(b *testing.B) {
	c := NewCache(nil)
	path := benchPaths[0].path
	c.Get(path, benchMD)
	b.Run("metadata", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c.Get(path, benchMD)
		}
	})
	b.Run("path_only", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			c.Get(path, Metadata{})
		}
	})
	b.Run("with_users", func(b *testing.B) {
		// A Cache that names users: the look at passwd's refresh time
		// added to each hit.
		cu := NewCache(&Options{Users: NewUsers(UsersOptions{PasswdFile: "/etc/passwd"})})
		session := "/user.slice/user-1000.slice/session-3.scope"
		cu.Get(session, Metadata{})
		b.ReportAllocs()
		for b.Loop() {
			cu.Get(session, Metadata{})
		}
	})
	b.Run("parallel_1000", func(b *testing.B) {
		paths := make([]string, 1000)
		for i := range paths {
			paths[i] = fmt.Sprintf("/system.slice/docker-%064x.scope", i)
			c.Get(paths[i], benchMD)
		}
		b.ReportAllocs()
		b.RunParallel(func(pb *testing.PB) {
			i := 0
			for pb.Next() {
				c.Get(paths[i%len(paths)], benchMD)
				i++
			}
		})
	})
}
