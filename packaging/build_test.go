package packaging_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/gpuscope/gpuscope/packaging/pkgtest"
)

// TestImageBuildFailureCleansUp: `packaging/build.sh image` copies the
// checkout into a build context under $TMPDIR; when `docker build` fails
// (no registry, a broken Dockerfile) the script exits non-zero and leaves
// no context behind (the newcomer trial found 70 MB of them in /tmp).
func TestImageBuildFailureCleansUp(t *testing.T) {
	repo := pkgtest.RepoRoot(t)
	bin := t.TempDir()
	// A docker whose daemon answers and whose builds fail, as one without
	// a registry does.
	fake := "#!/bin/sh\ncase \"$1\" in version) exit 0 ;; build) echo 'lookup registry-1.docker.io: no such host' >&2; exit 1 ;; esac\nexit 2\n"
	require.NoError(t, os.WriteFile(filepath.Join(bin, "docker"), []byte(fake), 0o755))
	tmp := t.TempDir()
	cmd := exec.Command("bash", "packaging/build.sh", "image")
	cmd.Dir = repo
	cmd.Env = append(os.Environ(), "TMPDIR="+tmp, "DOCKER="+filepath.Join(bin, "docker"))
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "a failed docker build fails the script:\n%s", out)
	require.Contains(t, string(out), "no such host")
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, left, "build.sh image left its context in $TMPDIR:\n%s", out)
}
