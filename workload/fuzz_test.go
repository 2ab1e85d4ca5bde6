package workload

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/prometheus/prometheus/model/labels"
	"github.com/prometheus/prometheus/promql/parser"
)

// FuzzResolve: whatever the path and metadata, Resolve does not panic and
// every label value is valid UTF-8, free of control characters, within
// its bound and selectable in PromQL; the runtime is one of the six.
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
		{path: "/user.slice/user-1000.slice/session-3.scope"},
		{path: "/user.slice/user-4294967295.slice/user@4294967295.service/app.slice/run-u1.scope"},
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
				// Selectable: the matcher Prometheus writes for it
				// parses back to it (PromQL refuses a literal U+FFFD).
				m := labels.MustNewMatcher(labels.MatchEqual, LabelNames()[i], v)
				ms, err := parser.NewParser(parser.Options{}).ParseMetricSelector("{" + m.String() + "}")
				if err != nil || len(ms) != 1 || ms[0].Value != v {
					t.Fatalf("%s=%q: PromQL reads %s as %v, %v", LabelNames()[i], v, m, ms, err)
				}
			}
		}
	})
}

// FuzzPathUID: whatever the path, the uid found is empty or a decimal
// below 2^32 that the path names as user-<uid>.slice or
// user@<uid>.service, and a Slurm v2 job directory is a prefix of the
// path ending in a job directory.
func FuzzPathUID(f *testing.F) {
	for _, p := range []string{
		"/user.slice/user-1000.slice/session-3.scope",
		"/user.slice/user-1000.slice/user@1000.service/app.slice/jupyter.service",
		"/user.slice/user-1000.slice/user@1001.service/user.slice/libpod-" + id1 + ".scope",
		"/user.slice/user-.slice/user@.service", "/user.slice/user-4294967296.slice/session-1.scope", "/user-1/user@x.service", "user@4294967296.service",
		"/system.slice/node1_slurmstepd.scope/job_42/step_0/user/task_0",
		"/system.slice/slurmstepd.scope/sEKNKTV3WPV500", "slurmstepd.scope/job_1", "/xslurmstepd.scope/job_1/",
	} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, path string) {
		if uid := pathUID(path); uid != "" {
			if _, err := strconv.ParseUint(uid, 10, 32); err != nil || !isDigits(uid, 10) {
				t.Fatalf("pathUID(%q) = %q, not a uid", path, uid)
			}
			if !strings.Contains(path, "user-"+uid+".slice") && !strings.Contains(path, "user@"+uid+".service") {
				t.Fatalf("pathUID(%q) = %q, which the path does not name", path, uid)
			}
		}
		if job, ok := slurmJobDir(path); ok {
			if !strings.HasPrefix(path, job) || (len(path) > len(job) && path[len(job)] != '/') {
				t.Fatalf("slurmJobDir(%q) = %q, not a directory of the path", path, job)
			}
			if !isSlurmJobDir(job[strings.LastIndexByte(job, '/')+1:], true) {
				t.Fatalf("slurmJobDir(%q) = %q, not a job directory", path, job)
			}
		}
	})
}

// FuzzParsePasswd: whatever the content, every name is a non-empty field
// without ':' or a line end, and the malformed lines are increasing line
// numbers of the content.
func FuzzParsePasswd(f *testing.F) {
	f.Add("root:x:0:0:root:/root:/bin/bash\nalice:x:1000:1000::/home/alice:/bin/sh\n")
	f.Add("+::::::\n# c\n\nbad\n:x:1:1:::\nx:x:-1:0:::\n")
	f.Add("a:b:4294967295:c:d:e:f\r\n")
	f.Fuzz(func(t *testing.T, in string) {
		names, malformed := ParsePasswd([]byte(in))
		lines := strings.Count(in, "\n") + 1
		for uid, name := range names {
			if name == "" || strings.ContainsAny(name, ":\n") {
				t.Fatalf("uid %d: name %q", uid, name)
			}
		}
		for i, n := range malformed {
			if n < 1 || n > lines || (i > 0 && n <= malformed[i-1]) {
				t.Fatalf("malformed lines %v of %d", malformed, lines)
			}
		}
		if uid, ok := StatusUID([]byte(in)); ok {
			if _, err := strconv.ParseUint(uid, 10, 32); err != nil {
				t.Fatalf("StatusUID: %q", uid)
			}
		}
	})
}
