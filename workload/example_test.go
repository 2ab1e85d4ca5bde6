package workload_test

import (
	"fmt"

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
		{"/gpu-burn/run-7", workload.Metadata{}},
	} {
		fmt.Println(workload.Resolve(c.path, c.md).Labels())
	}
	// Output:
	// [{workload llama-train} {runtime docker} {image llama:3.1}]
	// [{workload app/web-2} {runtime docker} {compose_project app} {compose_service web}]
	// [{workload docker-3f2a8c1d5e6b} {runtime docker}]
	// [{workload job 42.0/task_0} {runtime slurm} {slurm_job_id 42} {slurm_step 0} {slurm_user 1000}]
	// [{workload job 42.batch} {runtime slurm} {slurm_job_id 42} {slurm_step batch}]
	// [{workload nginx.service} {runtime systemd}]
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
