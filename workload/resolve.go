package workload

import (
	"strings"
)

// Metadata is what the runtimes already told cAdvisor about a cgroup; the
// zero value means nothing is known (a raw cgroup, an absent socket).
// Resolvers read it, they never ask a runtime themselves.
type Metadata struct {
	// Name is the container's name: cAdvisor's ContainerInfo.Aliases[0]
	// for the docker and podman handlers (the name without its "/").
	Name string
	// Image is cAdvisor's ContainerSpec.Image.
	Image string
	// Labels are cAdvisor's ContainerSpec.Labels: the container's labels,
	// among them Docker compose's com.docker.compose.*.
	Labels map[string]string
	// Runtime is cAdvisor's ContainerReference.Namespace ("docker",
	// "podman", "containerd") when one of its runtime handlers claimed the
	// cgroup. It lets a container under a custom cgroup parent, whose path
	// fits no default layout, still be recognised by its 64-hex id.
	Runtime string
	// User is the owner of a Slurm job when the caller knows it (a user
	// name), for slurm_user and user. Slurm's cgroup v1 paths carry the
	// uid and are used without it; v2 paths carry none, so slurm_user is
	// empty there without User (user is then found by a Cache with Users,
	// from the job's processes).
	User string
}

// Resolver recognises the cgroups of one runtime.
type Resolver interface {
	// Runtime is the runtime label value this resolver gives.
	Runtime() string
	// Resolve returns the identity of the cgroup at path and true when the
	// path (or, where documented, the metadata) is one of the runtime's;
	// false leaves the cgroup to the next resolver.
	Resolve(path string, md Metadata) (Identity, bool)
}

// DefaultResolvers returns the built-in resolvers in the order they are
// tried: the container runtimes first (their cgroups sit inside systemd
// slices and scopes), then Slurm (whose v2 jobs sit in a systemd scope),
// then systemd units. The raw cgroup path is not in the list: ResolveWith
// always ends with it.
func DefaultResolvers() []Resolver {
	return []Resolver{Docker{}, Podman{}, Containerd{}, Slurm{}, Systemd{}}
}

// Resolve returns the identity of the cgroup at path with the default
// resolvers; see ResolveWith.
func Resolve(path string, md Metadata) Identity {
	return ResolveWith(nil, path, md)
}

// ResolveWith tries rs in order (nil means DefaultResolvers) and returns
// the first match; when none matches, the runtime is "cgroup" and the
// workload the path itself ("/" for an empty path). Every value of the
// result is valid UTF-8 without control characters and within
// MaxWorkloadBytes or MaxValueBytes. The image comes from md.Image
// whatever the runtime. The user is what the path or md says, a uid left
// as a number: ResolveWith reads no file (a Cache with Users names uids
// and finds owners from processes).
func ResolveWith(rs []Resolver, path string, md Metadata) Identity {
	return finish(match(rs, path, md), md, nil)
}

// match returns the identity the first of rs (nil: the defaults) that
// recognises path gives, else the raw path's; values are not cleaned.
func match(rs []Resolver, path string, md Metadata) Identity {
	if path == "" {
		path = "/"
	}
	var (
		id Identity
		ok bool
	)
	if rs == nil {
		id, ok = resolveDefault(path, md)
	} else {
		for _, r := range rs {
			if id, ok = r.Resolve(path, md); ok {
				break
			}
		}
	}
	if !ok || id.Workload == "" || id.Runtime == "" {
		// A raw cgroup below a user's slice (a subtree systemd delegated
		// to the user: a jupyter kernel's, a job runner's) is still the
		// user's.
		id = Identity{Workload: path, Runtime: RuntimeCgroup, User: pathUID(path)}
	}
	return id
}

// finish completes a matched identity: a uid in User becomes its name in
// the host's passwd (users nil, or a uid passwd does not know: the uid),
// a user's systemd unit is named "<user>: <unit>", the image comes from
// md, and every value is cleaned.
func finish(id Identity, md Metadata, users *Users) Identity {
	if isUID(id.User) && users != nil {
		id.User = users.Name(id.User)
	}
	if id.Runtime == RuntimeSystemd && id.User != "" {
		id.Workload = id.User + ": " + id.Workload
	}
	if id.Image == "" {
		id.Image = md.Image
	}
	return id.sanitize()
}

// resolveDefault is DefaultResolvers without the slice and interface
// calls: Resolve runs once per new cgroup, but the fuzz and benchmarks
// run it a lot.
func resolveDefault(path string, md Metadata) (Identity, bool) {
	if id, ok := (Docker{}).Resolve(path, md); ok {
		return id, true
	}
	if id, ok := (Podman{}).Resolve(path, md); ok {
		return id, true
	}
	if id, ok := (Containerd{}).Resolve(path, md); ok {
		return id, true
	}
	if id, ok := (Slurm{}).Resolve(path, md); ok {
		return id, true
	}
	return Systemd{}.Resolve(path, md)
}

// splitBase returns the parent of path and its last element ("/a/b" →
// "/a", "b"); a trailing slash is ignored.
func splitBase(path string) (dir, base string) {
	path = strings.TrimSuffix(path, "/")
	i := strings.LastIndexByte(path, '/')
	if i < 0 {
		return "", path
	}
	return path[:i], path[i+1:]
}

// isHex64 reports whether s is a full container id: exactly 64 lower-case
// hex digits (Docker, Podman and containerd all print and name cgroups
// with lower case; anything else is not theirs).
func isHex64(s string) bool {
	if len(s) != 64 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// hexBetween returns the id in base when base is prefix + 64 hex + suffix.
func hexBetween(base, prefix, suffix string) (string, bool) {
	if len(base) != len(prefix)+64+len(suffix) ||
		!strings.HasPrefix(base, prefix) || !strings.HasSuffix(base, suffix) {
		return "", false
	}
	id := base[len(prefix) : len(prefix)+64]
	return id, isHex64(id)
}

func isDigits(s string, maxLen int) bool {
	if s == "" || len(s) > maxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
