// Package workload turns a cgroup path, plus what the container runtimes
// already told cAdvisor about it, into one identity a person recognises:
// the Docker or Podman container name, "project/service" for a compose
// service, "job 42" for a Slurm job, "nginx.service" for a systemd unit.
//
// Why a package of its own: users think in workloads, not in cgroup paths,
// and gpuscope labels two families of series with them, cAdvisor's
// container series (scrape/cadvisor) and the per-container GPU series
// (gpu/). Both take their labels from here, so the two always join, and
// nobody else parses a cgroup path. The layouts (Docker's and Podman's
// systemd and cgroupfs drivers, containerd, Slurm's cgroup v1 and v2
// plugins, systemd units) live next to their tests in one place.
//
// Shape: one Resolver per runtime, tried in a fixed order (docker, podman,
// containerd, slurm, systemd); the first that recognises the path wins and
// the raw cgroup path is last, as cAdvisor's container/factory.go tries its
// handlers' CanHandleAndAccept. Resolvers read only the path and a
// Metadata value (name, image, labels) that cAdvisor's ContainerSpec and
// ContainerReference already carry; they never call a runtime socket, so
// a scrape never waits on one, and an absent or unreadable socket only
// means poorer names (docker-3f2a1b4c5d6e instead of llama-train), never
// an error. A Cache computes each cgroup's identity once and is told by
// the caller (Forget) when cAdvisor forgets the container.
//
// The user: Identity.User says whose a workload is, from what the path
// names (user-<uid>.slice and user@<uid>.service for a user's sessions,
// units and rootless containers; uid_<uid> for Slurm's cgroup v1 jobs),
// else, for a Cache given Users, from the processes in the cgroup (the
// tasks of a Slurm job on the cgroup v2 plugin; a rootful container's
// init, which --user sets). Users names uids from the host's passwd
// (<host root>/etc/passwd, cAdvisor's /rootfs rule), re-read when it
// changes; a uid it does not name stays a number. No socket and no NSS
// call is made: a scrape never waits on a directory server. A user's
// session or unit is named with its user, "alice: session-3".
//
// Label values come from outside (container names, compose labels, cgroup
// directory names): every value is made valid UTF-8, control characters
// (newlines included) become spaces and lengths are bounded
// (MaxWorkloadBytes, MaxValueBytes), so a hostile name cannot break the
// exposition format, a legend or a TSDB limit. No label is per process:
// each value belongs to a cgroup, so the labels add no series to
// cAdvisor's, which already has one per cgroup.
//
// The labels (see Identity.Labels):
//
//	workload         what a person calls it (see the resolvers)
//	runtime          docker, podman, containerd, slurm, systemd or cgroup
//	image            the container image, as cAdvisor's own image label
//	compose_project  com.docker.compose.project
//	compose_service  com.docker.compose.service
//	slurm_job_id     Slurm job id (the SLUID where Slurm names the job so)
//	slurm_step       Slurm step: 0, 1, ..., batch, extern, interactive
//	slurm_user       the job's user: a name from Metadata, else the uid
//	                 of a cgroup v1 path (kept as it was, for compatibility)
//	user             whose it is: a name from the host's passwd, else the uid
//
// "job" is not used for Slurm's job id because Prometheus gives every
// scraped series a job label of its own.
package workload
