package workload

import (
	"strings"
)

// Systemd recognises a cgroup that is a systemd unit, the last element of
// the path being a unit name of a type that has a cgroup (.service,
// .scope, .slice, .socket, .mount, .swap): /system.slice/nginx.service is
// "nginx.service", /user.slice/user-1000.slice/session-3.scope is
// "session-3.scope". A unit of a user's service manager
// (…/user@1000.service/app.slice/foo.service) is "user@1000/foo.service",
// so it is not taken for the system's foo.service. It is tried after the
// container runtimes and Slurm, whose cgroups are scopes too.
type Systemd struct{}

// Runtime implements Resolver.
func (Systemd) Runtime() string { return RuntimeSystemd }

// Resolve implements Resolver.
func (Systemd) Resolve(path string, _ Metadata) (Identity, bool) {
	dir, base := splitBase(path)
	if !isUnitName(base) {
		return Identity{}, false
	}
	w := base
	if i := strings.Index(dir, "/user@"); i >= 0 {
		comp := dir[i+1:]
		if j := strings.IndexByte(comp, '/'); j >= 0 {
			comp = comp[:j]
		}
		if uid, ok := strings.CutSuffix(comp[len("user@"):], ".service"); ok && isDigits(uid, 10) {
			w = "user@" + uid + "/" + base
		}
	}
	return Identity{Workload: w, Runtime: RuntimeSystemd}, true
}

// isUnitName reports whether s is a systemd unit name (at most 255
// bytes of [A-Za-z0-9:_.@\-] and "\" escapes) of a type with a cgroup.
func isUnitName(s string) bool {
	if len(s) > 255 {
		return false
	}
	dot := strings.LastIndexByte(s, '.')
	if dot <= 0 {
		return false
	}
	switch s[dot+1:] {
	case "service", "scope", "slice", "socket", "mount", "swap":
	default:
		return false
	}
	for i := 0; i < dot; i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' ||
			c == ':' || c == '_' || c == '.' || c == '@' || c == '-' || c == '\\') {
			return false
		}
	}
	return true
}
