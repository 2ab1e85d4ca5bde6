package cadvisor

import (
	"context"
	"log/slog"
	"regexp"
	"slices"
	"strings"

	"github.com/google/cadvisor/lib/container"
	"github.com/google/cadvisor/lib/watcher"
)

// runtimes are the container runtimes whose cAdvisor factories gpuscope
// imports; each one whose socket is absent fails to register.
var runtimes = []string{"containerd", "crio", "docker", "podman"}

var registrationLine = regexp.MustCompile(`^Registration of the (\S+) container factory (failed|successfully)`)

// KlogHandler wraps the handler cAdvisor's klog lines go to. cAdvisor logs
// one long INFO line per runtime it tries at every start ("Registration of
// the crio container factory failed: Get http://…crio.sock…"), four on a
// host with Docker alone; they are demoted to DEBUG, and Run logs one line
// that names the runtimes found and not found instead.
func KlogHandler(h slog.Handler) slog.Handler { return klogHandler{h} }

type klogHandler struct{ slog.Handler }

func (h klogHandler) Handle(ctx context.Context, r slog.Record) error {
	if r.Level == slog.LevelInfo {
		if m := registrationLine.FindStringSubmatch(r.Message); m != nil {
			if !h.Enabled(ctx, slog.LevelDebug) {
				return nil
			}
			r = slog.NewRecord(r.Time, slog.LevelDebug, r.Message, r.PC)
		}
	}
	return h.Handler.Handle(ctx, r)
}

func (h klogHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return klogHandler{h.Handler.WithAttrs(as)}
}

func (h klogHandler) WithGroup(name string) slog.Handler {
	return klogHandler{h.Handler.WithGroup(name)}
}

// registeredRuntimes splits runtimes into those whose factory cAdvisor
// registered (their containers get name and image labels) and those it
// did not (no socket: their containers are raw cgroups, named by path).
func registeredRuntimes() (found, missing []string) {
	var registered []string
	for _, f := range container.GetReorderedFactoryList(watcher.Raw) {
		registered = append(registered, f.String())
	}
	for _, r := range runtimes {
		if slices.Contains(registered, r) {
			found = append(found, r)
		} else {
			missing = append(missing, r)
		}
	}
	return found, missing
}

func joinOrNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ",")
}
