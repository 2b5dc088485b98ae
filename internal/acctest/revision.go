package acctest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// Tests of what a provider upgrade does to existing state need state that
// an earlier build wrote: BuildRevision builds the provider at a git
// revision of this repository, and NewWorkspaceWith serves that build.

// BuildRevision builds the provider at rev (a commit of this repository,
// exported with git archive, so the working tree is not touched) into the
// test's temporary directory, removed when the test ends, and returns a CLI
// config file whose dev_overrides serve that build. It needs git and the
// repository's history.
func BuildRevision(t testing.TB, rev string) string {
	t.Helper()
	rc, err := buildRevision(rev, t.TempDir())
	if err != nil && shallowClone() {
		// A shallow clone (CI systems often make one) lacks older
		// commits: nothing to build, which is not a failure of the code.
		t.Skipf("skipped: this is a shallow clone, so the provider at %s cannot be built (%v); run it in a clone with history", rev, err)
	}
	if err != nil {
		t.Fatal(err)
	}
	return rc
}

// shallowClone says whether this repository is a shallow clone.
func shallowClone() bool {
	_, file, _, _ := runtime.Caller(0)
	out, err := exec.Command("git", "-C", filepath.Join(filepath.Dir(file), "..", ".."), "rev-parse", "--is-shallow-repository").Output()
	return err == nil && strings.TrimSpace(string(out)) == "true"
}

func buildRevision(rev, dir string) (string, error) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..")
	if out, err := exec.Command("git", "-C", root, "cat-file", "-e", rev+"^{commit}").CombinedOutput(); err != nil {
		return "", fmt.Errorf("commit %s is not in this repository (%v: %s): the test builds the provider at it, "+
			"so it needs a clone with history (not a shallow one) and git", rev, err, strings.TrimSpace(string(out)))
	}
	src := filepath.Join(dir, "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		return "", err
	}
	archive := exec.Command("bash", "-o", "pipefail", "-c", `git -C "$1" archive --format=tar "$2" | tar -x -C "$3"`, "archive", root, rev, src)
	if out, err := archive.CombinedOutput(); err != nil {
		return "", fmt.Errorf("git archive %s: %v\n%s", rev, err, out)
	}
	bin := filepath.Join(dir, "bin")
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "terraform-provider-kohaku"), ".")
	build.Dir = src
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build at %s: %v\n%s", rev, err, out)
	}
	rc := filepath.Join(dir, "terraformrc")
	conf := fmt.Sprintf("provider_installation {\n  dev_overrides {\n    \"registry.terraform.io/kohaku/kohaku\" = %[1]q\n    \"registry.opentofu.org/kohaku/kohaku\" = %[1]q\n  }\n  direct {}\n}\n", bin)
	return rc, os.WriteFile(rc, []byte(conf), 0o644)
}

// NewWorkspaceWith is NewWorkspace served by the provider build of the
// CLI config rc (from BuildRevision or CLIConfig).
func NewWorkspaceWith(t testing.TB, config, rc string) *Workspace {
	t.Helper()
	w := &Workspace{t: t, dir: t.TempDir(), rc: rc}
	w.Write(config)
	return w
}

// Serve makes the workspace's next commands use the provider build of the
// CLI config rc: how a test upgrades the provider under existing state.
func (w *Workspace) Serve(rc string) { w.rc = rc }

// StateFile reads the workspace's terraform.tfstate as Terraform wrote it.
func (w *Workspace) StateFile() []byte {
	w.t.Helper()
	b, err := os.ReadFile(filepath.Join(w.dir, "terraform.tfstate"))
	if err != nil {
		w.t.Fatal(err)
	}
	return b
}
