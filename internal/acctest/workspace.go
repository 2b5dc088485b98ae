package acctest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Tests that drive the real terraform CLI (to send it a signal, or to run
// two applies at once) end the same way: the host holds exactly what
// Terraform's state says (no orphaned domain or volume under the test's
// prefix), and the next apply converges.

// StateObjects lists, in Leftovers' words, the host objects the resources
// in a state record: each kohaku_vm's domain, overlay volume and the
// volumes of its new data disks, each kohaku_seed's and kohaku_image's
// volume.
func StateObjects(resources []StateResource) []string {
	var want []string
	for _, r := range resources {
		switch r.Type {
		case "kohaku_vm":
			name, _ := r.Values["name"].(string)
			want = append(want, "domain "+name)
			if ov, _ := r.Values["overlay_volume"].(string); ov != "" {
				want = append(want, "volume "+ov)
			}
			// New data disks' volumes, named as kohaku_vm names them.
			disks, _ := r.Values["data_disks"].([]any)
			for _, d := range disks {
				d, _ := d.(map[string]any)
				if d["size_gib"] == nil {
					continue // an existing volume: not the VM's
				}
				pool, _ := d["pool"].(string)
				disk, _ := d["name"].(string)
				format, _ := d["format"].(string)
				want = append(want, fmt.Sprintf("volume %s/%s-%s.%s", pool, name, disk, format))
			}
		case "kohaku_seed", "kohaku_image":
			id, _ := r.Values["id"].(string)
			want = append(want, "volume "+id)
		}
	}
	return want
}

// CheckExact compares what virsh lists under prefix with want, both as
// sets: nothing missing and nothing extra.
func CheckExact(env VMEnv, prefix string, want []string) error {
	got, err := Leftovers(env.URI, prefix, env.Pool, "default")
	if err != nil {
		return err
	}
	slices.Sort(got)
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		var missing, extra []string
		for _, w := range want {
			if !slices.Contains(got, w) {
				missing = append(missing, w)
			}
		}
		for _, g := range got {
			if !slices.Contains(want, g) {
				extra = append(extra, g)
			}
		}
		return fmt.Errorf("the host does not hold exactly what it should under %s:\n  missing (state says they exist): %v\n  orphaned (on the host, in no state): %v", prefix, missing, extra)
	}
	return nil
}

// ---------------------------------------------------------------- the CLI

// providerBuild is the provider binary built once per test binary, with a
// CLI config whose dev_overrides serve it to the real terraform CLI (the
// only way to send Terraform a signal: terraform-plugin-testing cannot).
var providerBuild struct {
	once     sync.Once
	dir, rc  string
	buildErr error
}

// CLIConfig builds the provider once per test binary and returns a
// terraform CLI config file whose dev_overrides serve that build.
func CLIConfig(t testing.TB) string {
	t.Helper()
	providerBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "kohaku-fault-provider-")
		if err != nil {
			providerBuild.buildErr = err
			return
		}
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "terraform-provider-kohaku"), ".")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			providerBuild.buildErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		rc := filepath.Join(dir, "terraformrc")
		// Both registries' spelling of kohaku/kohaku: Terraform resolves
		// the short source to registry.terraform.io, OpenTofu to
		// registry.opentofu.org.
		conf := fmt.Sprintf("provider_installation {\n  dev_overrides {\n    \"registry.terraform.io/kohaku/kohaku\" = %[1]q\n    \"registry.opentofu.org/kohaku/kohaku\" = %[1]q\n  }\n  direct {}\n}\n", dir)
		providerBuild.buildErr = os.WriteFile(rc, []byte(conf), 0o644)
		providerBuild.dir, providerBuild.rc = dir, rc
	})
	if providerBuild.buildErr != nil {
		t.Fatal(providerBuild.buildErr)
	}
	return providerBuild.rc
}

// ProviderDir is the directory of the provider binary CLIConfig built
// (terraform-provider-kohaku in it), or "" before the first build.
func ProviderDir() string { return providerBuild.dir }

// Workspace is one Terraform working directory driven through the CLI.
type Workspace struct {
	t   testing.TB
	dir string
	rc  string
}

// NewWorkspace makes a working directory whose main.tf is config, served the
// provider CLIConfig built.
func NewWorkspace(t testing.TB, config string) *Workspace {
	t.Helper()
	w := &Workspace{t: t, dir: t.TempDir(), rc: CLIConfig(t)}
	w.Write(config)
	return w
}

// Write replaces the workspace's main.tf with config.
func (w *Workspace) Write(config string) {
	w.t.Helper()
	if err := os.WriteFile(filepath.Join(w.dir, "main.tf"), []byte(config), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// Command prepares a terraform command in its own process group, so a
// signal reaches terraform alone (it forwards what it must to the provider).
func (w *Workspace) Command(args ...string) (*exec.Cmd, *bytes.Buffer) {
	cmd := exec.Command(CLI(), args...)
	cmd.Dir = w.dir
	cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+w.rc, "TF_IN_AUTOMATION=1", "TF_INPUT=0", "CHECKPOINT_DISABLE=1", "TF_CLI_ARGS=-no-color")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	return cmd, &out
}

// Run runs terraform to the end and returns its output and exit error.
func (w *Workspace) Run(args ...string) (string, error) {
	cmd, out := w.Command(args...)
	done := make(chan error, 1)
	if err := cmd.Start(); err != nil {
		return "", err
	}
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		return out.String(), err
	case <-time.After(15 * time.Minute):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // fails only if the group is gone already
		return out.String(), fmt.Errorf("terraform %s did not finish in 15 minutes (killed: %v)", strings.Join(args, " "), <-done)
	}
}

// Must runs terraform and fails the test when it fails.
func (w *Workspace) Must(args ...string) string {
	w.t.Helper()
	out, err := w.Run(args...)
	if err != nil {
		w.t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// StateResource is one resource of `terraform show -json`.
type StateResource struct {
	Address string         `json:"address"`
	Type    string         `json:"type"`
	Tainted bool           `json:"tainted"`
	Values  map[string]any `json:"values"`
}

// State reads the resources the state records.
func (w *Workspace) State() []StateResource {
	w.t.Helper()
	out := w.Must("show", "-json")
	var doc struct {
		Values *struct {
			RootModule struct {
				Resources []StateResource `json:"resources"`
			} `json:"root_module"`
		} `json:"values"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil {
		w.t.Fatalf("terraform show -json: %v\n%s", err, out)
	}
	if doc.Values == nil {
		return nil
	}
	return doc.Values.RootModule.Resources
}

// CheckHostMatchesState fails the test unless the host holds exactly what
// the state records under prefix.
func (w *Workspace) CheckHostMatchesState(env VMEnv, prefix string) []StateResource {
	w.t.Helper()
	st := w.State()
	if err := CheckExact(env, prefix, StateObjects(st)); err != nil {
		w.t.Fatal(err)
	}
	return st
}

// Converge applies again, requires an empty plan afterwards, destroys, and
// requires that nothing is left under prefix.
func (w *Workspace) Converge(env VMEnv, prefix string, wantObjects int) {
	w.t.Helper()
	w.Must("apply", "-auto-approve", "-input=false")
	st := w.CheckHostMatchesState(env, prefix)
	if got := len(StateObjects(st)); got != wantObjects {
		w.t.Fatalf("after the converging apply the state records %d host objects, want %d", got, wantObjects)
	}
	if out, err := w.Run("plan", "-detailed-exitcode", "-input=false"); err != nil {
		w.t.Fatalf("the plan after the converging apply is not empty (%v):\n%s", err, out)
	}
	w.Must("destroy", "-auto-approve", "-input=false")
	if err := CheckExact(env, prefix, nil); err != nil {
		w.t.Fatal(err)
	}
}

// Poll calls cond every 100ms until it is true or the deadline passes.
func Poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// Domains lists the domains under prefix with their state words, as
// `virsh list --all` shows them.
func Domains(env VMEnv, prefix string) map[string]string {
	out, err := Virsh(env.URI, "list", "--all")
	doms := map[string]string{}
	if err != nil {
		return doms
	}
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && strings.HasPrefix(f[1], prefix) {
			doms[f[1]] = strings.Join(f[2:], " ")
		}
	}
	return doms
}

// ---------------------------------------------------------------- libvirtd

// RestartLibvirtd SIGKILLs the test host's libvirtd and starts it again
// (testhost.sh restart). Running QEMU domains survive it.
func RestartLibvirtd(t testing.TB) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "testhost", "testhost.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "bash", script, "restart").CombinedOutput(); err != nil {
		t.Fatalf("testhost.sh restart: %v\n%s", err, out)
	}
}

var errNoTerraform = errors.New("terraform is not on PATH")

// CLI is the CLI the workspaces run: the one terraform-plugin-testing
// is told to use (TF_ACC_TERRAFORM_PATH, e.g. OpenTofu under make
// testacc-tofu), else terraform from PATH.
func CLI() string {
	if p := os.Getenv("TF_ACC_TERRAFORM_PATH"); p != "" {
		return p
	}
	return "terraform"
}

// NeedTerraform fails when the terraform CLI is missing (under TF_ACC
// terraform-plugin-testing needs it anyway).
func NeedTerraform(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath(CLI()); err != nil {
		t.Fatal(errNoTerraform)
	}
}
