package provider

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// The fault-injection tests end the same way: the host holds
// exactly what Terraform's state says (no orphaned domain or volume under
// the test's prefix), and the next apply converges.

// faultStateObjects lists, in vmLeftovers' words, the host objects the
// resources in a state record: each kohaku_vm's domain and overlay volume,
// each kohaku_seed's volume.
func faultStateObjects(resources []faultResource) []string {
	var want []string
	for _, r := range resources {
		switch r.Type {
		case "kohaku_vm":
			want = append(want, "domain "+r.Values["name"].(string))
			if ov, _ := r.Values["overlay_volume"].(string); ov != "" {
				want = append(want, "volume "+ov)
			}
		case "kohaku_seed", "kohaku_image":
			want = append(want, "volume "+r.Values["id"].(string))
		}
	}
	return want
}

// faultCheckExact compares what virsh lists under prefix with want, both as
// sets: nothing missing and nothing extra.
func faultCheckExact(env vmEnv, prefix string, want []string) error {
	got, err := vmLeftovers(env.URI, prefix, env.Pool, "default")
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

// faultProviderDir builds the provider binary once per test binary, with a
// CLI config whose dev_overrides serve it to the real terraform CLI (the only
// way to send Terraform a signal: terraform-plugin-testing cannot).
var faultBuild struct {
	once     sync.Once
	dir, rc  string
	buildErr error
}

func faultCLIConfig(t *testing.T) string {
	t.Helper()
	faultBuild.once.Do(func() {
		dir, err := os.MkdirTemp("", "kohaku-fault-provider-")
		if err != nil {
			faultBuild.buildErr = err
			return
		}
		_, file, _, _ := runtime.Caller(0)
		root := filepath.Join(filepath.Dir(file), "..", "..")
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "terraform-provider-kohaku"), ".")
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			faultBuild.buildErr = fmt.Errorf("go build: %v\n%s", err, out)
			return
		}
		rc := filepath.Join(dir, "terraformrc")
		// Both registries' spelling of kohaku/kohaku: Terraform resolves
		// the short source to registry.terraform.io, OpenTofu to
		// registry.opentofu.org.
		conf := fmt.Sprintf("provider_installation {\n  dev_overrides {\n    \"registry.terraform.io/kohaku/kohaku\" = %[1]q\n    \"registry.opentofu.org/kohaku/kohaku\" = %[1]q\n  }\n  direct {}\n}\n", dir)
		faultBuild.buildErr = os.WriteFile(rc, []byte(conf), 0o644)
		faultBuild.dir, faultBuild.rc = dir, rc
	})
	if faultBuild.buildErr != nil {
		t.Fatal(faultBuild.buildErr)
	}
	return faultBuild.rc
}

// faultWorkspace is one Terraform working directory driven through the CLI.
type faultWorkspace struct {
	t   *testing.T
	dir string
	rc  string
}

func newFaultWorkspace(t *testing.T, config string) *faultWorkspace {
	t.Helper()
	w := &faultWorkspace{t: t, dir: t.TempDir(), rc: faultCLIConfig(t)}
	w.write(config)
	return w
}

func (w *faultWorkspace) write(config string) {
	w.t.Helper()
	if err := os.WriteFile(filepath.Join(w.dir, "main.tf"), []byte(config), 0o644); err != nil {
		w.t.Fatal(err)
	}
}

// command prepares a terraform command in its own process group, so a
// signal reaches terraform alone (it forwards what it must to the provider).
func (w *faultWorkspace) command(args ...string) (*exec.Cmd, *bytes.Buffer) {
	cmd := exec.Command(faultCLI(), args...)
	cmd.Dir = w.dir
	cmd.Env = append(os.Environ(), "TF_CLI_CONFIG_FILE="+w.rc, "TF_IN_AUTOMATION=1", "TF_INPUT=0", "CHECKPOINT_DISABLE=1", "TF_CLI_ARGS=-no-color")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	return cmd, &out
}

// run runs terraform to the end and returns its output and exit error.
func (w *faultWorkspace) run(args ...string) (string, error) {
	cmd, out := w.command(args...)
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

// must runs terraform and fails the test when it fails.
func (w *faultWorkspace) must(args ...string) string {
	w.t.Helper()
	out, err := w.run(args...)
	if err != nil {
		w.t.Fatalf("terraform %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// faultResource is one resource of `terraform show -json`.
type faultResource struct {
	Address string         `json:"address"`
	Type    string         `json:"type"`
	Tainted bool           `json:"tainted"`
	Values  map[string]any `json:"values"`
}

// state reads the resources the state records.
func (w *faultWorkspace) state() []faultResource {
	w.t.Helper()
	out := w.must("show", "-json")
	var doc struct {
		Values *struct {
			RootModule struct {
				Resources []faultResource `json:"resources"`
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

// checkHostMatchesState fails the test unless the host holds exactly what
// the state records under prefix.
func (w *faultWorkspace) checkHostMatchesState(env vmEnv, prefix string) []faultResource {
	w.t.Helper()
	st := w.state()
	if err := faultCheckExact(env, prefix, faultStateObjects(st)); err != nil {
		w.t.Fatal(err)
	}
	return st
}

// converge applies again, requires an empty plan afterwards, destroys, and
// requires that nothing is left under prefix.
func (w *faultWorkspace) converge(env vmEnv, prefix string, wantObjects int) {
	w.t.Helper()
	w.must("apply", "-auto-approve", "-input=false")
	st := w.checkHostMatchesState(env, prefix)
	if got := len(faultStateObjects(st)); got != wantObjects {
		w.t.Fatalf("after the converging apply the state records %d host objects, want %d", got, wantObjects)
	}
	if out, err := w.run("plan", "-detailed-exitcode", "-input=false"); err != nil {
		w.t.Fatalf("the plan after the converging apply is not empty (%v):\n%s", err, out)
	}
	w.must("destroy", "-auto-approve", "-input=false")
	if err := faultCheckExact(env, prefix, nil); err != nil {
		w.t.Fatal(err)
	}
}

// faultPoll calls cond every 100ms until it is true or the deadline passes.
func faultPoll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if cond() {
			return true
		}
		time.Sleep(100 * time.Millisecond)
	}
	return false
}

// faultDomains lists the domains under prefix with their state words.
func faultDomains(env vmEnv, prefix string) map[string]string {
	out, err := vmVirsh(env.URI, "list", "--all")
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

// faultRestartLibvirtd SIGKILLs the test host's libvirtd and starts it again
// (testhost.sh restart). Running QEMU domains survive it.
func faultRestartLibvirtd(t *testing.T) {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	script := filepath.Join(filepath.Dir(file), "..", "acctest", "testhost", "testhost.sh")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if out, err := exec.CommandContext(ctx, "bash", script, "restart").CombinedOutput(); err != nil {
		t.Fatalf("testhost.sh restart: %v\n%s", err, out)
	}
}

// ---------------------------------------------------------------- RPC proxy

// The calls and errors the proxy fakes; the framing is virt's
// (virt.ReadPacket, virt.ParseHeader).
const (
	lvProcDefineXMLFlags = 350 // REMOTE_PROC_DOMAIN_DEFINE_XML_FLAGS
	lvProcVolUpload      = 208 // REMOTE_PROC_STORAGE_VOL_UPLOAD
	lvErrConfigUnsup     = 67  // VIR_ERR_CONFIG_UNSUPPORTED
	lvFromDomain         = 20  // VIR_FROM_DOMAIN
)

// faultProxy sits between the provider and libvirtd's TCP listener and
// answers chosen calls with an error of its own instead of passing them on:
// libvirt rejecting a call, on demand, whatever the input.
type faultProxy struct {
	ln       net.Listener
	upstream string
	reject   sync.Map // procedure -> message
	rejected atomic.Int64
	// hold keeps calls of a procedure from libvirtd and never answers
	// them: a call that hangs (held counts them).
	hold sync.Map // procedure -> true
	held atomic.Int64
	// rejectIf, when set, also rejects the calls it says yes to, with its
	// message (for faults that depend on the order of calls).
	rejectIf func(virt.Header) (any, bool)
}

func newFaultProxy(t *testing.T, upstream string) *faultProxy {
	return newFaultProxyRejecting(t, upstream, nil)
}

// newFaultProxyRejecting is newFaultProxy with a rejectIf, set before the
// proxy accepts its first connection.
func newFaultProxyRejecting(t *testing.T, upstream string, rejectIf func(virt.Header) (any, bool)) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, upstream: upstream, rejectIf: rejectIf}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go p.serve(c)
		}
	}()
	return p
}

// URI is the libvirt URI that reaches the host through the proxy.
func (p *faultProxy) URI() string {
	return fmt.Sprintf("qemu+tcp://%s/system", p.ln.Addr())
}

func (p *faultProxy) serve(client net.Conn) {
	defer client.Close()
	server, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return
	}
	defer server.Close()
	var wmu sync.Mutex // the client gets whole packets from both directions
	go func() {
		defer client.Close()
		for {
			b, err := virt.ReadPacket(server, nil)
			if err != nil {
				return
			}
			wmu.Lock()
			_, err = client.Write(b)
			wmu.Unlock()
			if err != nil {
				return
			}
		}
	}()
	for {
		b, err := virt.ReadPacket(client, nil)
		if err != nil {
			return
		}
		h := virt.ParseHeader(b)
		msg, ok := p.reject.Load(h.Procedure)
		ok = ok && h.Program == virt.WireProgRemote && h.Type == virt.WireTypeCall
		if !ok && p.rejectIf != nil {
			msg, ok = p.rejectIf(h)
		}
		if ok {
			p.rejected.Add(1)
			wmu.Lock()
			_, err = client.Write(lvErrorReply(b, msg.(string)))
			wmu.Unlock()
			if err != nil {
				return
			}
			continue
		}
		if _, ok := p.hold.Load(h.Procedure); ok && h.Program == virt.WireProgRemote && h.Type == virt.WireTypeCall {
			p.held.Add(1)
			continue
		}
		if _, err := server.Write(b); err != nil {
			return
		}
	}
}

// lvErrorReply is the error reply libvirtd would send to call, a
// remote_error with the given message.
func lvErrorReply(call []byte, msg string) []byte {
	var body bytes.Buffer
	u32 := func(v uint32) { body.Write(binary.BigEndian.AppendUint32(nil, v)) }
	u32(lvErrConfigUnsup) // code
	u32(lvFromDomain)     // domain
	u32(1)                // message: present
	u32(uint32(len(msg)))
	body.WriteString(msg)
	body.Write(make([]byte, (4-len(msg)%4)%4))
	u32(2) // level: VIR_ERR_ERROR
	u32(0) // dom: absent
	u32(0) // str1
	u32(0) // str2
	u32(0) // str3
	u32(0) // int1
	u32(0) // int2
	u32(0) // net: absent
	out := make([]byte, virt.WireHeaderLen, virt.WireHeaderLen+body.Len())
	copy(out[4:24], call[4:24]) // program, version, procedure, type, serial
	binary.BigEndian.PutUint32(out[16:], virt.WireTypeReply)
	binary.BigEndian.PutUint32(out[24:], virt.WireStatusError)
	out = append(out, body.Bytes()...)
	binary.BigEndian.PutUint32(out[0:], uint32(len(out)))
	return out
}

var errNoTerraform = errors.New("terraform is not on PATH")

// faultCLI is the CLI the workspaces run: the one terraform-plugin-testing
// is told to use (TF_ACC_TERRAFORM_PATH, e.g. OpenTofu under make
// testacc-tofu), else terraform from PATH.
func faultCLI() string {
	if p := os.Getenv("TF_ACC_TERRAFORM_PATH"); p != "" {
		return p
	}
	return "terraform"
}

// faultNeedTerraform fails when the terraform CLI is missing (under TF_ACC
// terraform-plugin-testing needs it anyway).
func faultNeedTerraform(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath(faultCLI()); err != nil {
		t.Fatal(errNoTerraform)
	}
}
