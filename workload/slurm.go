package workload

import (
	"strings"
)

// Slurm recognises the cgroups of Slurm's cgroup plugins (slurmd's
// proctrack/cgroup and task/cgroup):
//
//	cgroup v1: <prepend>/uid_<uid>[/job_<job>[/step_<step>[/task_<n>]]]
//	cgroup v2: <slice>/[<node>_]slurmstepd.scope/job_<job>[/step_<step>[/user[/task_<n>]|/slurm]]
//
// <prepend> is cgroup.conf's CgroupPrepend, "/slurm" by default
// ("/slurm_<node>" with multiple slurmd); <slice> is CgroupSlice,
// system.slice by default. <step> is a number, "batch", "extern",
// "interactive", "TBD", or "<n>+<m>" for a heterogeneous step. From Slurm
// 26.05 the v2 plugin names job directories by the job's SLUID
// ("sEKNKTV3WPV500") unless CgroupJobIdPaths=yes; the SLUID then stands
// in for the job id, as the path holds nothing else.
//
// Workloads use Slurm's own job.step notation: "job 42" for the job,
// "job 42.0", "job 42.batch", "job 42.extern" for its steps, and the rest
// of the path for what is below a step ("job 42.0/task_0" on v1,
// "job 42.0/user/task_0" and "job 42.0/slurm", the step's slurmstepd, on
// v2). Every cgroup keeps a workload of its own because cgroup statistics
// are hierarchical: a step's use includes its tasks', and a shared name
// would add them up twice; group by slurm_job_id and slurm_step instead.
// A v1 user directory is "user <uid>". slurm_user is md.User when given,
// else the uid of a v1 path; a v2 path has no user, so slurm_user is
// empty there without md.User (as it always was: the label is kept
// unchanged for the queries that read it). User, the user label, is the
// same md.User or v1 uid; on v2 a Cache with Users finds it from the
// job's processes (Users: the owner of its tasks).
type Slurm struct{}

// Runtime implements Resolver.
func (Slurm) Runtime() string { return RuntimeSlurm }

// Resolve implements Resolver.
func (Slurm) Resolve(path string, md Metadata) (Identity, bool) {
	if !strings.Contains(path, "/uid_") && !strings.Contains(path, "slurmstepd.scope/") {
		return Identity{}, false
	}
	parts := strings.Split(strings.Trim(path, "/"), "/")
	for i, p := range parts {
		if uid, ok := strings.CutPrefix(p, "uid_"); ok && isDigits(uid, 10) {
			rest := parts[i+1:]
			// The uid directory's parent is CgroupPrepend ("/slurm",
			// "/slurm_<node>"); any other parent needs a job below.
			if (i > 0 && strings.HasPrefix(parts[i-1], "slurm")) ||
				(len(rest) > 0 && isSlurmJobDir(rest[0], false)) {
				return slurmIdentity(rest, uid, md, false)
			}
		}
		if p == "slurmstepd.scope" || strings.HasSuffix(p, "_slurmstepd.scope") {
			if len(parts) > i+1 {
				return slurmIdentity(parts[i+1:], "", md, true)
			}
		}
	}
	return Identity{}, false
}

func slurmIdentity(rest []string, uid string, md Metadata, v2 bool) (Identity, bool) {
	id := Identity{Runtime: RuntimeSlurm, SlurmUser: md.User}
	if id.SlurmUser == "" {
		id.SlurmUser = uid
	}
	id.User = id.SlurmUser
	if len(rest) == 0 {
		if id.SlurmUser == "" {
			return Identity{}, false
		}
		id.Workload = "user " + id.SlurmUser
		return id, true
	}
	if !isSlurmJobDir(rest[0], v2) {
		return Identity{}, false
	}
	id.SlurmJob = strings.TrimPrefix(rest[0], "job_")
	id.Workload = "job " + id.SlurmJob
	rest = rest[1:]
	if len(rest) > 0 {
		if step, ok := strings.CutPrefix(rest[0], "step_"); ok && isSlurmStep(step) {
			id.SlurmStep = step
			id.Workload += "." + step
			rest = rest[1:]
		}
	}
	if len(rest) > 0 {
		id.Workload += "/" + strings.Join(rest, "/")
	}
	return id, true
}

// isSlurmJobDir reports whether s is job_<id> (a uint32) or, on v2, a
// SLUID: "s" and 13 characters of Crockford's base32 as Slurm prints it.
func isSlurmJobDir(s string, v2 bool) bool {
	if j, ok := strings.CutPrefix(s, "job_"); ok {
		return isDigits(j, 10)
	}
	if !v2 || len(s) != 14 || s[0] != 's' {
		return false
	}
	for i := 1; i < len(s); i++ {
		c := s[i]
		if !(c >= '0' && c <= '9' || c >= 'A' && c <= 'Z') || c == 'I' || c == 'L' || c == 'O' || c == 'U' {
			return false
		}
	}
	return true
}

// isSlurmStep reports whether s is a step id as Slurm's
// log_build_step_id_str prints it without the job.
func isSlurmStep(s string) bool {
	switch s {
	case "batch", "extern", "interactive", "TBD":
		return true
	}
	n, het, isHet := strings.Cut(s, "+")
	return isDigits(n, 10) && (!isHet || isDigits(het, 10))
}

// slurmJobDir returns the job directory of a path of Slurm's cgroup v2
// layout (…/[<node>_]slurmstepd.scope/job_<job>, or the SLUID), the path
// itself or an ancestor; false for any other path.
func slurmJobDir(path string) (string, bool) {
	i := strings.Index(path, "slurmstepd.scope/")
	if i < 0 {
		return "", false
	}
	scope := path[:i+len("slurmstepd.scope")]
	if j := strings.LastIndexByte(scope, '/'); j < 0 || (scope[j+1:] != "slurmstepd.scope" && !strings.HasSuffix(scope, "_slurmstepd.scope")) {
		return "", false
	}
	job, _, _ := strings.Cut(path[i+len("slurmstepd.scope/"):], "/")
	if !isSlurmJobDir(job, true) {
		return "", false
	}
	return scope + "/" + job, true
}
