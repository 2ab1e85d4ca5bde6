package workload

import (
	"strconv"
	"strings"
)

// Docker compose's container labels (also set by podman-compose and
// nerdctl compose).
const (
	ComposeProjectLabel = "com.docker.compose.project"
	ComposeServiceLabel = "com.docker.compose.service"
	ComposeNumberLabel  = "com.docker.compose.container-number"
	ComposeOneoffLabel  = "com.docker.compose.oneoff"
)

// Docker recognises Docker's container cgroups:
//
//	/system.slice/docker-<id>.scope        systemd driver, cgroup v1 and v2
//	/user.slice/.../docker-<id>.scope      rootless, systemd driver
//	/docker/<id>, .../docker/<id>          cgroupfs driver, v1 and v2
//
// where <id> is exactly 64 lower-case hex digits, and any cgroup whose
// last element holds such an id when md.Runtime is "docker" (a custom
// --cgroup-parent). Mount units that hold an id
// (var-lib-docker-containers-<id>-mounts-shm.mount) are not containers.
//
// The workload is the compose name (see Compose) or the container name,
// else docker-<first 12 hex of the id>, the short id Docker prints.
type Docker struct{}

// Runtime implements Resolver.
func (Docker) Runtime() string { return RuntimeDocker }

// Resolve implements Resolver.
func (Docker) Resolve(path string, md Metadata) (Identity, bool) {
	dir, base := splitBase(path)
	id, ok := hexBetween(base, "docker-", ".scope")
	if !ok {
		if _, parent := splitBase(dir); parent == "docker" && isHex64(base) {
			id, ok = base, true
		}
	}
	if !ok && md.Runtime == RuntimeDocker && !strings.HasSuffix(base, ".mount") {
		id, ok = findHex64(base)
	}
	if !ok {
		return Identity{}, false
	}
	return containerIdentity(RuntimeDocker, path, md, RuntimeDocker+"-"+id[:12]), true
}

// Podman recognises Podman's container cgroups:
//
//	/machine.slice/libpod-<id>.scope              rootful, systemd driver
//	/machine.slice/libpod-<id>.scope/container    --cgroups=split
//	/user.slice/.../libpod-<id>.scope[/container] rootless
//	/libpod_parent/libpod-<id>                    cgroupfs driver
//	/machine.slice/libpod-conmon-<id>.scope       the container's conmon
//
// and, when md.Runtime is "podman", any last element holding a 64-hex id.
// The workload is the compose name, the container name or
// podman-<12 hex>; a conmon cgroup (Podman's monitor process for the
// container, which cAdvisor attributes to the same container) gets the
// container's workload plus "/conmon", so it is not added to the
// container's own use.
type Podman struct{}

// Runtime implements Resolver.
func (Podman) Runtime() string { return RuntimePodman }

// Resolve implements Resolver.
func (Podman) Resolve(path string, md Metadata) (Identity, bool) {
	dir, base := splitBase(path)
	if base == "container" {
		_, base = splitBase(dir)
	}
	suffix := ""
	id, ok := hexBetween(base, "libpod-", ".scope")
	if !ok {
		id, ok = hexBetween(base, "libpod-", "")
	}
	if !ok {
		if id, ok = hexBetween(base, "libpod-conmon-", ".scope"); ok {
			suffix = "/conmon"
		}
	}
	if !ok && md.Runtime == RuntimePodman && !strings.HasSuffix(base, ".mount") {
		id, ok = findHex64(base)
	}
	if !ok {
		return Identity{}, false
	}
	ident := containerIdentity(RuntimePodman, path, md, RuntimePodman+"-"+id[:12])
	ident.Workload += suffix
	return ident, true
}

// Containerd recognises containerd's container cgroups:
//
//	.../cri-containerd-<id>.scope   CRI plugin, systemd driver (kubepods)
//	.../nerdctl-<id>.scope          nerdctl, systemd driver
//	/default/<id>, /k8s.io/<id>     cgroupfs driver, containerd namespace
//	/default/<name>, /k8s.io/<name> cgroupfs, a name given to ctr
//
// and, when md.Runtime is "containerd", any last element holding a 64-hex
// id. Other namespaces are not guessed from the path alone: /<dir>/<id>
// is also Docker's cgroupfs layout under a custom --cgroup-parent. The workload is the compose name (nerdctl compose), the container
// name, else containerd-<12 hex> or, for a named container,
// <namespace>/<name>.
type Containerd struct{}

// Runtime implements Resolver.
func (Containerd) Runtime() string { return RuntimeContainerd }

// Resolve implements Resolver.
func (Containerd) Resolve(path string, md Metadata) (Identity, bool) {
	dir, base := splitBase(path)
	id, ok := hexBetween(base, "cri-containerd-", ".scope")
	if !ok {
		id, ok = hexBetween(base, "nerdctl-", ".scope")
	}
	if !ok && md.Runtime == RuntimeContainerd && !strings.HasSuffix(base, ".mount") {
		id, ok = findHex64(base)
	}
	fallback := ""
	if ok {
		fallback = RuntimeContainerd + "-" + id[:12]
	} else if gp, ns := splitBase(dir); gp == "" && (ns == "default" || ns == "k8s.io") {
		switch {
		case isHex64(base):
			ok, fallback = true, RuntimeContainerd+"-"+base[:12]
		case isContainerdID(base):
			ok, fallback = true, ns+"/"+base
		}
	}
	if !ok {
		return Identity{}, false
	}
	return containerIdentity(RuntimeContainerd, path, md, fallback), true
}

// Compose gives a compose service's containers the workload
// "<project>/<service>", from the com.docker.compose.project and
// .service labels (both needed). Replicas past the first add "-<n>" from
// com.docker.compose.container-number ("app/web", "app/web-2",
// "app/web-3"): the common single replica keeps the plain name, and each
// replica of a scaled service still has a workload of its own; group by
// compose_project and compose_service for the whole service. A one-off
// container (docker compose run, com.docker.compose.oneoff=True) is not
// the service: it keeps its container name. Compose is not a runtime, so
// it is not a Resolver: the docker, podman and containerd resolvers apply
// it, and the runtime label stays theirs.
func Compose(md Metadata) (workload, project, service string, ok bool) {
	project, service = md.Labels[ComposeProjectLabel], md.Labels[ComposeServiceLabel]
	if project == "" || service == "" {
		return "", "", "", false
	}
	if strings.EqualFold(md.Labels[ComposeOneoffLabel], "true") && md.Name != "" {
		return md.Name, project, service, true
	}
	workload = project + "/" + service
	if n, err := strconv.Atoi(md.Labels[ComposeNumberLabel]); err == nil && n > 1 {
		workload += "-" + strconv.Itoa(n)
	}
	return workload, project, service, true
}

// containerIdentity is a container's identity. A rootless container's
// path names its owner (the user's service manager, user@<uid>.service,
// holds it); a rootful one's User is left for a Cache with Users to find
// from its processes.
func containerIdentity(runtime, path string, md Metadata, fallback string) Identity {
	id := Identity{Runtime: runtime, Workload: md.Name, User: pathUID(path)}
	if w, project, service, ok := Compose(md); ok {
		id.Workload, id.ComposeProject, id.ComposeService = w, project, service
	}
	if id.Workload == "" {
		id.Workload = fallback
	}
	return id
}

// findHex64 returns the first run of exactly 64 lower-case hex digits in s.
func findHex64(s string) (string, bool) {
	run := 0
	for i := 0; i <= len(s); i++ {
		if i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] >= 'a' && s[i] <= 'f') {
			run++
			continue
		}
		if run == 64 {
			return s[i-64 : i], true
		}
		run = 0
	}
	return "", false
}

// isContainerdID reports whether s fits containerd's identifier rule
// (namespaces and container ids): [A-Za-z0-9]+([._-][A-Za-z0-9]+)*, at
// most 76 bytes.
func isContainerdID(s string) bool {
	if s == "" || len(s) > 76 {
		return false
	}
	prevSep := true
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
			prevSep = false
		case c == '.' || c == '_' || c == '-':
			if prevSep {
				return false
			}
			prevSep = true
		default:
			return false
		}
	}
	return !prevSep
}
