package workload

import (
	"unicode/utf8"
)

// Runtime label values.
const (
	RuntimeDocker     = "docker"
	RuntimePodman     = "podman"
	RuntimeContainerd = "containerd"
	RuntimeSlurm      = "slurm"
	RuntimeSystemd    = "systemd"
	RuntimeCgroup     = "cgroup"
)

// Label names, in the order LabelNames and Identity.Values use.
const (
	LabelWorkload       = "workload"
	LabelRuntime        = "runtime"
	LabelImage          = "image"
	LabelComposeProject = "compose_project"
	LabelComposeService = "compose_service"
	LabelSlurmJobID     = "slurm_job_id"
	LabelSlurmStep      = "slurm_step"
	LabelSlurmUser      = "slurm_user"
	LabelUser           = "user"
)

// Bounds on label values, in bytes. A longer value is cut at a rune
// boundary and ends in "…" (a cgroup path keeps its tail and starts with
// "…" instead, as the tail tells paths apart). 128 bytes is already more
// than a legend or a table cell shows; 256 leaves room for an image
// reference with a registry, a path and a sha256 digest.
const (
	MaxWorkloadBytes = 128
	MaxValueBytes    = 256
)

// Identity is what a cgroup is to a person and the runtime's own names for
// it. Workload and Runtime are always set by Resolve; the others are empty
// where the runtime has no such thing or nothing told us.
type Identity struct {
	Workload       string
	Runtime        string
	Image          string
	ComposeProject string
	ComposeService string
	SlurmJob       string
	SlurmStep      string
	SlurmUser      string
	// User is whose the workload is: a user name from the host's passwd,
	// else the uid in decimal (see Users). A Resolver sets it to the uid
	// the path names (user-<uid>.slice, user@<uid>.service, Slurm's
	// uid_<uid>) or to Metadata.User; ResolveWith and Cache turn a uid
	// into a name, and a Cache with Users finds the owner of a Slurm v2
	// job or a rootful container from its processes.
	User string
}

// Label is one Prometheus label pair.
type Label struct {
	Name, Value string
}

// pairs is every label of the identity, empty values included, in the
// order of LabelNames; an array, so the callers below allocate nothing
// they do not return.
func (id Identity) pairs() [9]Label {
	return [9]Label{
		{LabelWorkload, id.Workload}, {LabelRuntime, id.Runtime}, {LabelImage, id.Image},
		{LabelComposeProject, id.ComposeProject}, {LabelComposeService, id.ComposeService},
		{LabelSlurmJobID, id.SlurmJob}, {LabelSlurmStep, id.SlurmStep}, {LabelSlurmUser, id.SlurmUser},
		{LabelUser, id.User},
	}
}

// LabelNames returns every label name Identity can carry, in a fixed
// order (the order of Values). It returns a new slice each call.
func LabelNames() []string {
	ps := Identity{}.pairs()
	names := make([]string, len(ps))
	for i, p := range ps {
		names[i] = p.Name
	}
	return names
}

// Values returns the label values in LabelNames order, "" where unknown:
// for collectors with a fixed label set, such as
// prometheus.MustNewConstMetric. Prometheus treats an empty label value
// as an absent label, so this and Labels store the same series.
func (id Identity) Values() []string {
	ps := id.pairs()
	vals := make([]string, len(ps))
	for i, p := range ps {
		vals[i] = p.Value
	}
	return vals
}

// Labels returns the label pairs with a value, in LabelNames order; empty
// values are left out (an empty label is an absent label in Prometheus).
func (id Identity) Labels() []Label {
	var out []Label
	for _, p := range id.pairs() {
		if p.Value != "" {
			out = append(out, p)
		}
	}
	return out
}

// AddTo sets the identity's non-empty labels in m, overwriting what is
// there: for cAdvisor's ContainerLabelsFunc, whose map already holds id,
// name and image (image is the same Spec.Image, made safe here).
func (id Identity) AddTo(m map[string]string) {
	// Called for every container at every cAdvisor scrape: no slice.
	for _, p := range id.pairs() {
		if p.Value != "" {
			m[p.Name] = p.Value
		}
	}
}

// sanitize makes every value valid UTF-8, without control characters and
// within its bound. The workload of the raw cgroup runtime is a path and
// keeps its tail when cut.
func (id Identity) sanitize() Identity {
	if id.Runtime == RuntimeCgroup {
		id.Workload = cleanTail(id.Workload, MaxWorkloadBytes)
	} else {
		id.Workload = clean(id.Workload, MaxWorkloadBytes)
	}
	id.Runtime = clean(id.Runtime, MaxValueBytes)
	id.Image = clean(id.Image, MaxValueBytes)
	id.ComposeProject = clean(id.ComposeProject, MaxValueBytes)
	id.ComposeService = clean(id.ComposeService, MaxValueBytes)
	id.SlurmJob = clean(id.SlurmJob, MaxValueBytes)
	id.SlurmStep = clean(id.SlurmStep, MaxValueBytes)
	id.SlurmUser = clean(id.SlurmUser, MaxValueBytes)
	id.User = clean(id.User, MaxValueBytes)
	return id
}

const ellipsis = "…"

// Clean returns s as Identity's values are made: valid UTF-8, each
// control character (newlines, tabs, escapes) a space, at most max bytes,
// cut at a rune boundary and ending in "…" when cut. For other text from
// outside shown beside them, such as a process's command line.
func Clean(s string, max int) string { return clean(s, max) }

// clean returns s as valid UTF-8 with each control character (C0, DEL,
// C1, U+2028, U+2029: newlines, tabs, escapes) replaced by a space and
// each invalid byte by its \xNN escape, cut to at most max bytes at a rune
// boundary with a trailing "…" when cut. Plain printable ASCII within
// the bound is returned as is, without allocating.
func clean(s string, max int) string {
	if s = replaceBad(s); len(s) <= max {
		return s
	}
	cut := max - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}

// cleanTail is clean but keeps the end of s and starts with "…" when cut.
func cleanTail(s string, max int) string {
	if s = replaceBad(s); len(s) <= max {
		return s
	}
	from := len(s) - (max - len(ellipsis))
	for from < len(s) && !utf8.RuneStart(s[from]) {
		from++
	}
	return ellipsis + s[from:]
}

func replaceBad(s string) string {
	ok := true
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f {
			ok = false
			break
		}
	}
	if ok {
		return s
	}
	b := make([]byte, 0, len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			// LabelValue's \xNN, not U+FFFD: PromQL's lexer refuses a
			// literal U+FFFD in a string ("invalid UTF-8 rune"), so a
			// name holding one could not be selected, in /workload/ or
			// by any user's query.
			b = appendByteEscape(b, s[i])
		case r < 0x20 || (r >= 0x7f && r < 0xa0) || r == 0x2028 || r == 0x2029:
			b = append(b, ' ')
		default:
			b = append(b, s[i:i+n]...)
		}
		i += n
	}
	return string(b)
}
