//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// tools are the real neighbour programs, built from the pinned versions
// of ../tools/*/go.mod: the Prometheus and Alertmanager that users run
// next to gpuscope, and their command-line tools.
type tools struct {
	Prometheus   string
	Promtool     string
	Alertmanager string
	Amtool       string
}

// neighbours holds the one build of tools per test process.
var neighbours struct {
	once  sync.Once
	tools tools
	err   error
}

// neighbourTools builds the neighbour programs once per test process
// into a folder beside the gpuscope binary, which TestMain removes. Go's
// build cache makes every build after the first mostly a link.
func neighbourTools(t *testing.T) tools {
	t.Helper()
	neighbours.once.Do(func() {
		started := time.Now()
		neighbours.tools, neighbours.err = buildTools(filepath.Join(filepath.Dir(binary), "tools"))
		if neighbours.err == nil {
			t.Logf("neighbour programs built in %s", time.Since(started).Round(100*time.Millisecond))
		}
	})
	if neighbours.err != nil {
		t.Fatalf("build the neighbour programs of ../tools: %v", neighbours.err)
	}
	return neighbours.tools
}

// alertmanagerModule is the module whose source buildTools copies.
const alertmanagerModule = "github.com/prometheus/alertmanager"

// buildTools builds the neighbour programs into dir/bin: one `go build`
// per module of ../tools. There are two because Prometheus v0.316.0 and
// Alertmanager need different major APIs of one dependency (see
// ../tools/prometheus/go.mod).
//
// Alertmanager's module as published lacks its web UI: ui/web.go embeds
// ui/app/dist, which its release process builds with npm and which is in
// no module zip, so `go build` of cmd/alertmanager from the module cache
// fails ("pattern app/dist: no matching files found"), and -overlay may
// not add files under the module cache. The build therefore copies the
// module's source (the pinned version, from the module cache) into dir,
// adds a one-page placeholder UI, and replaces the module with that copy
// through a go.mod of its own (-modfile); ../tools/alertmanager/go.mod
// stays as `go get -tool` wrote it. The tests use Alertmanager's API and
// amtool, never its web UI. -trimpath keeps the copy's path out of the
// build cache's keys, so the next test process finds its packages
// compiled.
func buildTools(dir string) (tools, error) {
	toolsDir, err := filepath.Abs(filepath.Join("..", "tools"))
	if err != nil {
		return tools{}, err
	}
	bin := filepath.Join(dir, "bin")
	built := tools{
		Prometheus:   filepath.Join(bin, "prometheus"),
		Promtool:     filepath.Join(bin, "promtool"),
		Alertmanager: filepath.Join(bin, "alertmanager"),
		Amtool:       filepath.Join(bin, "amtool"),
	}
	if os.Getenv(testBinEnv) != "" && built.exist() {
		return built, nil // an earlier tier of this scripts/test run built them
	}
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return tools{}, err
	}
	// remove_all_sd leaves out the cloud and Kubernetes service
	// discoveries (their SDKs are most of a cold build: about 20 minutes
	// of CPU with them); the tests use static and file configs only.
	err = goBuild(filepath.Join(toolsDir, "prometheus"), bin, []string{"-tags=remove_all_sd"}, "",
		"github.com/prometheus/prometheus/cmd/prometheus",
		"github.com/prometheus/prometheus/cmd/promtool")
	if err != nil {
		return tools{}, err
	}

	amDir := filepath.Join(toolsDir, "alertmanager")
	var mod struct{ Dir, Version, Error string }
	download := exec.Command("go", "mod", "download", "-json", alertmanagerModule)
	download.Dir = amDir
	out, err := download.Output()
	if jsonErr := json.Unmarshal(out, &mod); jsonErr != nil || err != nil || mod.Error != "" {
		return tools{}, fmt.Errorf("go mod download %s: %v %s %s", alertmanagerModule, err, mod.Error, out)
	}
	src := filepath.Join(dir, "src", "alertmanager@"+mod.Version)
	if err := copyTree(mod.Dir, src); err != nil {
		return tools{}, fmt.Errorf("copy %s: %w", mod.Dir, err)
	}
	dist := filepath.Join(src, "ui", "app", "dist")
	if err := os.MkdirAll(dist, 0o755); err != nil {
		return tools{}, err
	}
	placeholder := "<!DOCTYPE html><title>Alertmanager</title><p>Built by gpuscope's e2e tests without the web UI; the API is at /api/v2/.\n"
	if err := os.WriteFile(filepath.Join(dist, "index.html"), []byte(placeholder), 0o644); err != nil {
		return tools{}, err
	}
	goMod, err := os.ReadFile(filepath.Join(amDir, "go.mod"))
	if err != nil {
		return tools{}, err
	}
	goSum, err := os.ReadFile(filepath.Join(amDir, "go.sum"))
	if err != nil {
		return tools{}, err
	}
	modfile := filepath.Join(dir, "alertmanager.mod")
	goMod = fmt.Appendf(goMod, "\nreplace %s => %s\n", alertmanagerModule, src)
	if err := os.WriteFile(modfile, goMod, 0o644); err != nil {
		return tools{}, err
	}
	if err := os.WriteFile(strings.TrimSuffix(modfile, ".mod")+".sum", goSum, 0o644); err != nil {
		return tools{}, err
	}
	// Stamped with its release as Alertmanager's own build is: amtool
	// then checks the server's version against its own, and warns on
	// every command when they differ (an embedded Alertmanager that
	// reported gpuscope's version did).
	stamp := "-X github.com/prometheus/common/version.Version=" + strings.TrimPrefix(mod.Version, "v")
	err = goBuild(amDir, bin, []string{"-modfile=" + modfile}, stamp,
		"github.com/prometheus/alertmanager/cmd/alertmanager",
		"github.com/prometheus/alertmanager/cmd/amtool")
	if err != nil {
		return tools{}, err
	}
	return built, nil
}

// exist says whether all four programs are there.
func (ts tools) exist() bool {
	for _, p := range []string{ts.Prometheus, ts.Promtool, ts.Alertmanager, ts.Amtool} {
		if _, err := os.Stat(p); err != nil {
			return false
		}
	}
	return true
}

// goBuild runs one `go build` of pkgs in the module at modDir, writing
// the executables into bin; ldflags are added to the linker's.
func goBuild(modDir, bin string, flags []string, ldflags string, pkgs ...string) error {
	// Without the symbol table and DWARF, as the gpuscope binary: less
	// work for the linker, which is most of a cached build. Pure Go:
	// neither program needs cgo.
	args := append([]string{"build"}, flags...)
	args = append(args, "-trimpath", strings.TrimSpace("-ldflags=-s -w "+ldflags), "-o", bin+string(filepath.Separator))
	args = append(args, pkgs...)
	build := exec.Command("go", args...)
	build.Dir = modDir
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return fmt.Errorf("go %s (in %s): %w\n%s", strings.Join(args, " "), modDir, err, out)
	}
	return nil
}

// copyTree copies the regular files of the tree from into to, writable
// (the module cache's are read-only).
func copyTree(from, to string) error {
	return filepath.WalkDir(from, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(from, path)
		if err != nil {
			return err
		}
		target := filepath.Join(to, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
}
