package workload

import (
	"strconv"
	"strings"
)

// Systemd recognises a cgroup that is a systemd unit, the last element of
// the path being a unit name of a type that has a cgroup (.service,
// .scope, .slice, .socket, .mount, .swap): /system.slice/nginx.service is
// "nginx.service". It is tried after the container runtimes and Slurm,
// whose cgroups are scopes too.
//
// A user's work (below user-<uid>.slice: login sessions, the user's
// service manager user@<uid>.service and its units) has that uid as its
// User and is named by its unit with the user in front once the uid has
// a name (ResolveWith, Cache): /user.slice/user-1000.slice/session-3.scope
// is "alice: session-3", …/user@1000.service/app.slice/jupyter.service is
// "alice: jupyter.service" (not the system's jupyter.service), with
// "1000: session-3" where passwd does not name uid 1000. A scope drops
// its ".scope": its name is an id systemd made up (session-3, run-u42),
// while a service or slice keeps the name someone gave it.
type Systemd struct{}

// Runtime implements Resolver.
func (Systemd) Runtime() string { return RuntimeSystemd }

// Resolve implements Resolver.
func (Systemd) Resolve(path string, _ Metadata) (Identity, bool) {
	_, base := splitBase(path)
	if !isUnitName(base) {
		return Identity{}, false
	}
	id := Identity{Workload: base, Runtime: RuntimeSystemd, User: pathUID(path)}
	if id.User != "" {
		id.Workload = strings.TrimSuffix(base, ".scope")
	}
	return id, true
}

// pathUID returns the uid that a path below a user's slice names: that of
// the user's service manager (user@<uid>.service), else of the slice
// (user-<uid>.slice); "" when the path names none. Rootless Docker and
// Podman put their containers below the user's service manager, so it
// also names the owner of a rootless container.
func pathUID(path string) string {
	if !strings.Contains(path, "/user") {
		return ""
	}
	slice := ""
	for rest := path; rest != ""; {
		var elem string
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			elem, rest = rest[:i], rest[i+1:]
		} else {
			elem, rest = rest, ""
		}
		if uid, ok := between(elem, "user@", ".service"); ok && isUID(uid) {
			return uid
		}
		if uid, ok := between(elem, "user-", ".slice"); ok && isUID(uid) && slice == "" {
			slice = uid
		}
	}
	return slice
}

// isUID reports whether s is a uid in decimal: below 2^32.
func isUID(s string) bool {
	if !isDigits(s, 10) {
		return false
	}
	_, err := strconv.ParseUint(s, 10, 32)
	return err == nil
}

// between returns what s has between prefix and suffix.
func between(s, prefix, suffix string) (string, bool) {
	if len(s) < len(prefix)+len(suffix) || !strings.HasPrefix(s, prefix) || !strings.HasSuffix(s, suffix) {
		return "", false
	}
	return s[len(prefix) : len(s)-len(suffix)], true
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
