package workload_test

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/gpuscope/gpuscope/workload"
)

func ExampleResolve() {
	const id = "3f2a8c1d5e6b7a8f9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b"
	for _, c := range []struct {
		path string
		md   workload.Metadata
	}{
		// What cAdvisor's docker handler knows: Aliases[0], Spec.Image, Spec.Labels.
		{"/system.slice/docker-" + id + ".scope", workload.Metadata{Name: "llama-train", Image: "llama:3.1"}},
		{"/docker/" + id, workload.Metadata{Name: "app-web-2", Labels: map[string]string{
			"com.docker.compose.project": "app", "com.docker.compose.service": "web",
			"com.docker.compose.container-number": "2",
		}}},
		{"/system.slice/docker-" + id + ".scope", workload.Metadata{}}, // no Docker socket
		{"/slurm/uid_1000/job_42/step_0/task_0", workload.Metadata{}},
		{"/system.slice/slurmstepd.scope/job_42/step_batch", workload.Metadata{}},
		{"/system.slice/nginx.service", workload.Metadata{}},
		{"/user.slice/user-1000.slice/session-3.scope", workload.Metadata{}},
		{"/gpu-burn/run-7", workload.Metadata{}},
	} {
		fmt.Println(workload.Resolve(c.path, c.md).Labels())
	}
	// Output:
	// [{workload llama-train} {runtime docker} {image llama:3.1}]
	// [{workload app/web-2} {runtime docker} {compose_project app} {compose_service web}]
	// [{workload docker-3f2a8c1d5e6b} {runtime docker}]
	// [{workload job 42.0/task_0} {runtime slurm} {slurm_job_id 42} {slurm_step 0} {slurm_user 1000} {user 1000}]
	// [{workload job 42.batch} {runtime slurm} {slurm_job_id 42} {slurm_step batch}]
	// [{workload nginx.service} {runtime systemd}]
	// [{workload 1000: session-3} {runtime systemd} {user 1000}]
	// [{workload /gpu-burn/run-7} {runtime cgroup}]
}

func ExampleCache() {
	c := workload.NewCache(nil)
	path := "/machine.slice/libpod-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef.scope"
	// The GPU side sees the pid's cgroup first and knows nothing else.
	fmt.Println(c.Get(path, workload.Metadata{}).Workload)
	// cAdvisor's podman handler then passes the container's name.
	fmt.Println(c.Get(path, workload.Metadata{Name: "vllm", Runtime: "podman"}).Workload)
	// From then on the path alone gives the name, computed once.
	fmt.Println(c.Get(path, workload.Metadata{}).Workload)
	// cAdvisor forgot the container: so does the cache.
	c.Forget(path)
	fmt.Println(c.Len())
	// Output:
	// podman-0123456789ab
	// vllm
	// vllm
	// 0
}

func ExampleUsers() {
	dir, err := os.MkdirTemp("", "example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	passwd := filepath.Join(dir, "passwd")
	if err := os.WriteFile(passwd, []byte("root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/bash\n"), 0o644); err != nil {
		panic(err)
	}
	c := workload.NewCache(&workload.Options{Users: workload.NewUsers(workload.UsersOptions{PasswdFile: passwd})})
	for _, path := range []string{
		"/user.slice/user-1000.slice/session-3.scope",
		"/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service",
		"/user.slice/user-1001.slice/session-7.scope", // uid 1001 is not in passwd
		"/slurm/uid_1000/job_42/step_0",
	} {
		id := c.Get(path, workload.Metadata{})
		fmt.Printf("%s (user %s)\n", id.Workload, id.User)
	}
	// Output:
	// alice: session-3 (user alice)
	// alice: jupyter.service (user alice)
	// 1001: session-7 (user 1001)
	// job 42.0 (user alice)
}
