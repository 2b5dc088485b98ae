package provider

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
)

// Fault injection. Every case ends with the host holding exactly
// what the state records under the test's prefix, and with an apply that
// converges. The VMs boot no OS (no kernel, and the base image has no boot
// loader): they cost no guest boot, and a guest that never phones home is
// what the phone-home wait case needs.

// faultVM is a kohaku_vm block booting nothing, 128 MiB.
func faultVM(env acctest.VMEnv, label, name, pool, base, nic, extra string) string {
	return fmt.Sprintf(`
resource "kohaku_vm" %q {
  name       = %s
  type       = "qemu"
  memory_mib = 128
  disk = {
    base_pool   = %q
    base_volume = %q
    pool        = %q
  }
  network_interface = [%s]
  shutdown_timeout  = "1s"
%s
}
`, label, name, env.ImagePool, base, pool, nic, extra)
}

// faultCLIHead is what the terraform CLI needs on top: the provider's
// address, served by dev_overrides.
const faultCLIHead = `terraform {
  required_providers {
    kohaku = { source = "kohaku/kohaku" }
  }
}
`

const faultUserNIC = `{ type = "user" }`

// faultCheckState checks, inside terraform-plugin-testing, that the host
// holds exactly what the state records under prefix.
func faultCheckState(env acctest.VMEnv, prefix string) resource.TestCheckFunc {
	return func(s *terraform.State) error {
		var rs []acctest.StateResource
		for _, r := range s.RootModule().Resources {
			a := r.Primary.Attributes
			rs = append(rs, acctest.StateResource{Type: r.Type, Values: map[string]any{"name": a["name"], "overlay_volume": a["overlay_volume"], "id": a["id"]}})
		}
		want := acctest.StateObjects(rs)
		if len(want) == 0 {
			return fmt.Errorf("the state records no host object")
		}
		return acctest.CheckExact(env, prefix, want)
	}
}

// Create failing at each step: the error names the step, the host holds
// nothing of the VM, and once the cause is fixed the next apply creates it
// and the plan after it is empty.
func TestAccFault_createSteps(t *testing.T) {
	env := acctest.NewVMEnv(t)
	tcp := acctest.Env(t, "KOHAKU_TEST_TCP_URI")
	prefix := vmTestPrefix(t, env, "fstep")
	// Define is refused by a proxy in front of libvirtd's TCP listener: the
	// provider validates every input libvirt would refuse at define, so
	// only an injected fault reaches that step.
	proxy := newFaultProxy(t, faultTCPHostPort(t, tcp))
	const rejectMsg = "unsupported configuration: injected by the fault test"

	cases := []struct {
		short     string
		uri       string
		bad, good func(name string) string
		want      func(name string) []string
		inject    func()
		heal      func()
		state     string // virsh domstate after the good apply
	}{
		{
			short: "pool",
			uri:   env.URI,
			bad: func(n string) string {
				return faultVM(env, "test", fmt.Sprintf("%q", n), prefix+"nopool", env.Base, faultUserNIC, "  running = false")
			},
			want: func(n string) []string {
				return []string{`Creating VM ` + n + ` failed at step "create the overlay volume"`, `the host has no pool "` + prefix + `nopool"`, "Nothing was created."}
			},
			state: "shut off",
		},
		{
			short: "base",
			uri:   env.URI,
			bad: func(n string) string {
				return faultVM(env, "test", fmt.Sprintf("%q", n), env.Pool, "no-such-image.qcow2", faultUserNIC, "  running = false")
			},
			want: func(n string) []string {
				return []string{`Creating VM ` + n + ` failed at step "create the overlay volume"`, `has no volume "no-such-image.qcow2"`, "Nothing was created."}
			},
			state: "shut off",
		},
		{
			short:  "define",
			uri:    proxy.URI(),
			inject: func() { proxy.reject.Store(uint32(lvProcDefineXMLFlags), rejectMsg) },
			heal:   func() { proxy.reject.Delete(uint32(lvProcDefineXMLFlags)) },
			want: func(n string) []string {
				return []string{`Creating VM ` + n + ` failed at step "define the domain"`, rejectMsg,
					"Rolled back: deleted overlay volume " + env.Pool + "/" + n + "-root.qcow2."}
			},
			state: "shut off",
		},
		{
			short: "start",
			uri:   env.URI,
			bad: func(n string) string {
				return faultVM(env, "test", fmt.Sprintf("%q", n), env.Pool, env.Base, `{ type = "network", source = "`+prefix+`nonet" }`, "")
			},
			want: func(n string) []string {
				return []string{`Creating VM ` + n + ` failed at step "start the domain"`, prefix + "nonet",
					"Rolled back: undefined domain " + n + "; deleted overlay volume " + env.Pool + "/" + n + "-root.qcow2."}
			},
			state: "running",
		},
	}
	for _, tc := range cases {
		t.Run(tc.short, func(t *testing.T) {
			t.Parallel()
			name := prefix + tc.short
			good := faultVM(env, "test", fmt.Sprintf("%q", name), env.Pool, env.Base, faultUserNIC, "  running = "+fmt.Sprint(tc.state == "running"))
			bad := good
			if tc.bad != nil {
				bad = tc.bad(name)
			}
			inject, heal := func() {}, func() {}
			if tc.inject != nil {
				inject, heal = tc.inject, tc.heal
			}
			block := providerBlock(tc.uri)
			resource.Test(t, resource.TestCase{
				ProtoV6ProviderFactories: protoV6Providers,
				CheckDestroy:             acctest.CheckNothingLeft(env, name),
				Steps: []resource.TestStep{
					{PreConfig: inject, Config: block + bad, ExpectError: vmErrRE(tc.want(name)...)},
					// The failed create left nothing: exactly no object.
					{PreConfig: heal, Config: block, Check: func(*terraform.State) error { return acctest.CheckExact(env, name, nil) }},
					// Fixed: the next apply converges (the framework plans
					// again after it and fails on a non-empty plan).
					{Config: block + good, Check: resource.ComposeAggregateTestCheckFunc(
						faultCheckState(env, name),
						acctest.CheckDomState(env, name, tc.state),
					)},
				},
			})
		})
	}
}

// A libvirt call that never answers does not stretch a create past its
// timeout: libvirtd never sees the define (the proxy holds
// it), and the create, with a 20 s timeout and the default 2-minute
// call_timeout, fails at its deadline naming the step, rolls back the
// overlay it made, and the whole apply takes the timeout plus the rollback.
func TestAccFault_hungCallKeepsTheCreateTimeout(t *testing.T) {
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "fhung")
	proxy := newFaultProxy(t, faultTCPHostPort(t, acctest.Env(t, "KOHAKU_TEST_TCP_URI")))
	proxy.hold.Store(uint32(lvProcDefineXMLFlags), true)
	name := prefix + "vm"
	const timeout = 20 * time.Second
	cfg := providerBlock(proxy.URI()) + faultVM(env, "test", fmt.Sprintf("%q", name), env.Pool, env.Base, faultUserNIC,
		fmt.Sprintf("  running = false\n  timeouts {\n    create = %q\n  }", timeout))
	var start time.Time
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, name),
		Steps: []resource.TestStep{
			{
				PreConfig: func() { start = time.Now() },
				Config:    cfg,
				ExpectError: vmErrRE(`Creating VM `+name+` failed at step "define the domain"`, "deadline",
					"Rolled back: deleted overlay volume "+env.Pool+"/"+name+"-root.qcow2."),
			},
			{
				PreConfig: func() {
					took := time.Since(start)
					t.Logf("apply with a hung define and a %s create timeout returned after %s (%d calls held)", timeout, took.Round(100*time.Millisecond), proxy.held.Load())
					if proxy.held.Load() == 0 {
						t.Error("the define was never held: the test proved nothing")
					}
					if took > timeout+15*time.Second {
						t.Errorf("the apply took %s with a %s create timeout: a hung call overran it", took, timeout)
					}
					proxy.hold.Delete(uint32(lvProcDefineXMLFlags))
				},
				Config: providerBlock(env.URI),
				Check:  func(*terraform.State) error { return acctest.CheckExact(env, name, nil) },
			},
		},
	})
}

// faultTCPHostPort turns qemu+tcp://127.0.0.1/system into 127.0.0.1:16509.
func faultTCPHostPort(t *testing.T, uri string) string {
	m := regexp.MustCompile(`^qemu\+tcp://([^/:]+)(?::(\d+))?/`).FindStringSubmatch(uri)
	if m == nil {
		t.Fatalf("KOHAKU_TEST_TCP_URI %q is not a qemu+tcp URI", uri)
	}
	if m[2] == "" {
		m[2] = "16509"
	}
	return m[1] + ":" + m[2]
}

// faultInterruptApply starts terraform apply, waits for when(), sends
// terraform SIGINT (as Ctrl-C would) and waits for it to exit. It returns
// terraform's output and whether the signal was sent before the apply ended.
func faultInterruptApply(t *testing.T, w *acctest.Workspace, when func() bool, args ...string) (string, bool) {
	t.Helper()
	cmd, out := w.Command(append([]string{"apply", "-auto-approve", "-input=false"}, args...)...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	sent := false
	deadline := time.After(10 * time.Minute)
wait:
	for {
		select {
		case err := <-done:
			t.Logf("terraform apply ended (%v) before the moment came", err)
			return out.String(), false
		case <-deadline:
			break wait
		case <-time.After(100 * time.Millisecond):
			if when() {
				break wait
			}
		}
	}
	if err := syscall.Kill(cmd.Process.Pid, syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	sent = true
	select {
	case err := <-done:
		if err == nil {
			t.Logf("terraform apply exited 0 after SIGINT")
		}
	case <-time.After(5 * time.Minute):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // fails only if the group is gone already
		t.Fatalf("terraform did not exit within 5 minutes of SIGINT (killed: %v):\n%s", <-done, out)
	}
	return out.String(), sent
}

// SIGINT while VMs are being created: Terraform stops, the provider either
// finishes a create (and state records it) or rolls it back; the host holds
// exactly what state records. The next apply creates the rest.
func TestAccFault_sigintDuringCreate(t *testing.T) {
	env := acctest.NewVMEnv(t)
	acctest.NeedTerraform(t)
	prefix := vmTestPrefix(t, env, "fint")
	const n = 8
	cfg := faultCLIHead + providerBlock(env.URI) + fmt.Sprintf("locals { n = %d }\n", n) +
		faultVM(env, "test", fmt.Sprintf(`"%s${count.index}"`, prefix), env.Pool, env.Base, faultUserNIC, "  count = local.n")
	w := acctest.NewWorkspace(t, cfg)
	// Interrupt once the first domain exists: the others are in flight or
	// not started yet.
	out, sent := faultInterruptApply(t, w, func() bool { return len(acctest.Domains(env, prefix)) > 0 }, "-parallelism=2")
	if !sent {
		t.Fatalf("the apply finished before any domain appeared:\n%s", out)
	}
	if !strings.Contains(out, "Interrupt received") {
		t.Errorf("terraform did not report the interrupt:\n%s", out)
	}
	st := w.CheckHostMatchesState(env, prefix)
	t.Logf("after SIGINT: %d of %d VMs in state, host matches state; terraform said:\n%s", len(st), n, faultTail(out, 25))
	if len(st) == n {
		t.Errorf("all %d VMs were created despite the interrupt: the signal came too late to test anything", n)
	}
	w.Converge(env, prefix, 2*n)
}

// SIGINT while seeds upload: libvirtd never answers the
// upload calls (the proxy holds them), so every seed's volume exists on the
// host and its upload hangs when the interrupt comes. Terraform stops, each
// create deletes the volume it made, and the host holds exactly what state
// records (nothing); once the uploads go through, the next apply converges.
func TestAccFault_sigintDuringSeedUpload(t *testing.T) {
	env := acctest.NewVMEnv(t)
	acctest.NeedTerraform(t)
	prefix := vmTestPrefix(t, env, "fup")
	const n = 3
	faultSIGINTDuringUploads(t, env, prefix, n, "the upload was interrupted; whatever of the volume was made was deleted", func(uri string) string {
		return providerBlock(uri) + fmt.Sprintf(`
resource "kohaku_seed" "test" {
  count    = %d
  name     = "%s${count.index}.iso"
  pool     = %q
  hostname = "upload-${count.index}"
}
`, n, prefix, env.Pool)
	})
}

// faultSIGINTDuringUploads applies cfg (given the proxy's URI) with n
// volume uploads, holds every upload call once each volume exists, sends
// terraform SIGINT, and checks that the output says want, that the host
// holds what state records (nothing), and, with the uploads let through,
// that the next apply converges.
func faultSIGINTDuringUploads(t *testing.T, env acctest.VMEnv, prefix string, n int, want string, cfg func(uri string) string) {
	t.Helper()
	proxy := newFaultProxy(t, faultTCPHostPort(t, acctest.Env(t, "KOHAKU_TEST_TCP_URI")))
	proxy.hold.Store(uint32(lvProcVolUpload), true)
	w := acctest.NewWorkspace(t, faultCLIHead+cfg(proxy.URI()))
	volumes := func() int {
		left, err := acctest.Leftovers(env.URI, prefix, env.Pool)
		if err != nil {
			t.Fatal(err)
		}
		return len(left)
	}
	out, sent := faultInterruptApply(t, w, func() bool { return proxy.held.Load() == int64(n) && volumes() == n })
	if !sent {
		t.Fatalf("the apply ended before the uploads hung:\n%s", out)
	}
	flat := strings.Join(strings.Fields(out), " ") // terraform wraps long lines
	for _, s := range []string{"Interrupt received", want} {
		if !strings.Contains(flat, s) {
			t.Errorf("terraform's output lacks %q:\n%s", s, out)
		}
	}
	if st := w.CheckHostMatchesState(env, prefix); len(st) != 0 {
		t.Errorf("state records %d objects whose uploads never finished", len(st))
	}
	t.Logf("after SIGINT with %d uploads hanging: no volume left, state empty; terraform said:\n%s", n, faultTail(out, 12))
	proxy.hold.Delete(uint32(lvProcVolUpload))
	w.Converge(env, prefix, n)
}

// SIGINT while the provider waits for a guest that never phones home: the
// wait ends at once (not at the create timeout), the VM is kept tainted in
// state as on a timeout, and the host holds exactly the VM, its overlay and
// the seed. An apply with the wait turned off replaces the VM and converges.
func TestAccFault_sigintDuringWait(t *testing.T) {
	env := acctest.NewVMEnv(t)
	acctest.NeedTerraform(t)
	prefix := vmTestPrefix(t, env, "fwait")
	port := acctest.ClosedPort(t)
	cfg := func(vmExtra string) string {
		return faultCLIHead + fmt.Sprintf(`
provider "kohaku" {
  uri = %q
  phone_home = {
    listen_address = "127.0.0.1:%d"
    base_url       = "http://10.0.2.2:%d"
  }
}

resource "kohaku_seed" "test" {
  name       = "%sseed.iso"
  pool       = %q
  hostname   = "never-ready"
  phone_home = true
}
`, env.URI, port, port, prefix, env.Pool) + faultVM(env, "test", fmt.Sprintf("%q", prefix+"vm"), env.Pool, env.Base, faultUserNIC,
			"  seed_id = kohaku_seed.test.id\n"+vmExtra)
	}
	w := acctest.NewWorkspace(t, cfg("  timeouts {\n    create = \"8m\"\n  }"))
	var waitingSince time.Time
	start := time.Now()
	out, sent := faultInterruptApply(t, w, func() bool {
		if acctest.Domains(env, prefix)[prefix+"vm"] != "running" {
			return false
		}
		if waitingSince.IsZero() {
			waitingSince = time.Now()
		}
		// Running, so Create is in the wait: let it wait a little.
		return time.Since(waitingSince) > 3*time.Second
	})
	if !sent {
		t.Fatalf("the apply ended before the VM ran:\n%s", out)
	}
	if took := time.Since(start); took > 4*time.Minute {
		t.Errorf("terraform took %s to stop after SIGINT: the wait did not end on the interrupt", took)
	}
	for _, want := range []string{"Interrupt received", `failed at step "wait for the guest to be ready"`, prefix + "vm"} {
		if !strings.Contains(out, want) {
			t.Errorf("terraform's output lacks %q:\n%s", want, out)
		}
	}
	st := w.CheckHostMatchesState(env, prefix)
	var vm *acctest.StateResource
	for i := range st {
		if st[i].Type == "kohaku_vm" {
			vm = &st[i]
		}
	}
	if vm == nil || !vm.Tainted || len(st) != 2 {
		t.Fatalf("want the seed and the VM (tainted) in state, got %+v\nterraform said:\n%s", st, out)
	}
	t.Logf("after SIGINT in the wait: VM kept tainted, host matches state; terraform said:\n%s", faultTail(out, 25))
	w.Write(cfg("  wait_for = \"none\""))
	w.Converge(env, prefix, 3)
}

// libvirtd is SIGKILLed and started again while VMs are being created: the
// creates in flight fail with an error naming the step and the host, what
// was made is rolled back or recorded, and the next apply converges.
func TestAccFault_libvirtdRestart(t *testing.T) {
	env := acctest.NewVMEnv(t)
	acctest.NeedTerraform(t)
	prefix := vmTestPrefix(t, env, "fkill")
	const n = 8
	cfg := faultCLIHead + providerBlock(env.URI) +
		faultVM(env, "test", fmt.Sprintf(`"%s${count.index}"`, prefix), env.Pool, env.Base, faultUserNIC, fmt.Sprintf("  count = %d", n))
	w := acctest.NewWorkspace(t, cfg)
	cmd, outBuf := w.Command("apply", "-auto-approve", "-input=false", "-parallelism=2")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	if !acctest.Poll(5*time.Minute, func() bool { return len(acctest.Domains(env, prefix)) > 0 }) {
		t.Fatal("no domain appeared")
	}
	restarted := time.Now()
	acctest.RestartLibvirtd(t)
	t.Logf("libvirtd killed and back in %s", time.Since(restarted).Round(time.Millisecond))
	var err error
	select {
	case err = <-done:
	case <-time.After(10 * time.Minute):
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) // fails only if the group is gone already
		t.Fatalf("terraform apply did not end within 10 minutes of the restart (killed: %v)", <-done)
	}
	out := outBuf.String()
	if err == nil {
		t.Logf("the apply succeeded across the restart (every call after it redialed)")
	} else {
		// What failed says which step and which host.
		if !regexp.MustCompile(`failed at step "[a-z ]+"`).MatchString(out) {
			t.Errorf("the failure does not name the step:\n%s", out)
		}
		if !strings.Contains(out, "127.0.0.1") && !strings.Contains(out, env.URI) && !strings.Contains(out, "libvirt") {
			t.Errorf("the failure does not name the host or libvirt:\n%s", out)
		}
		if strings.Contains(out, "panic") {
			t.Errorf("the provider panicked:\n%s", out)
		}
	}
	st := w.CheckHostMatchesState(env, prefix)
	t.Logf("after the restart: %d of %d VMs in state, host matches state; terraform said:\n%s", len(st), n, faultTail(out, 30))
	w.Converge(env, prefix, 2*n)
}

// A refresh while twenty creates run: a second working directory refreshes
// its own VMs over and over while the first creates twenty on the same
// host. Every refresh finds no change, and each directory's state matches
// the host exactly.
func TestAccFault_refreshWhileCreating(t *testing.T) {
	env := acctest.NewVMEnv(t)
	acctest.NeedTerraform(t)
	prefix := vmTestPrefix(t, env, "fref")
	vms := func(sub string, n int) string {
		return faultCLIHead + providerBlock(env.URI) +
			faultVM(env, "test", fmt.Sprintf(`"%s%s${count.index}"`, prefix, sub), env.Pool, env.Base, faultUserNIC, fmt.Sprintf("  count = %d\n  running = false", n))
	}
	a := acctest.NewWorkspace(t, vms("a-", 4))
	b := acctest.NewWorkspace(t, vms("b-", 20))
	a.Must("apply", "-auto-approve", "-input=false")

	cmd, bOut := b.Command("apply", "-auto-approve", "-input=false", "-parallelism=10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	refreshes, during := 0, 0
	var bErr error
loop:
	for {
		select {
		case bErr = <-done:
			break loop
		default:
		}
		before := len(acctest.Domains(env, prefix+"b-"))
		out, err := a.Run("plan", "-detailed-exitcode", "-input=false")
		refreshes++
		if err != nil {
			t.Errorf("refresh %d while creating: %v\n%s", refreshes, err, out)
		}
		if after := len(acctest.Domains(env, prefix+"b-")); before < 20 && after > before {
			during++ // creates ran while this refresh did
		}
	}
	if bErr != nil {
		t.Fatalf("creating twenty: %v\n%s", bErr, bOut)
	}
	t.Logf("%d refreshes ran, %d of them while domains were being created", refreshes, during)
	if during == 0 {
		t.Errorf("no refresh overlapped the creates: nothing was tested")
	}
	a.CheckHostMatchesState(env, prefix+"a-")
	if st := b.CheckHostMatchesState(env, prefix+"b-"); len(st) != 20 {
		t.Errorf("want 20 VMs in state, got %d", len(st))
	}
	b.Converge(env, prefix+"b-", 40)
	a.Converge(env, prefix+"a-", 8)
}

// faultTail is the last n lines of s.
func faultTail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// faultWaitConfig is a provider listening for phone-home calls on port, a
// seed that phones home, and a VM booting nothing with vmExtra.
func faultWaitConfig(env acctest.VMEnv, prefix string, port int, waitFor, vmExtra string) string {
	return fmt.Sprintf(`
provider "kohaku" {
  uri = %q
  phone_home = {
    listen_address = "127.0.0.1:%d"
    base_url       = "http://10.0.2.2:%d"
  }
}

resource "kohaku_seed" "test" {
  name       = "%sseed.iso"
  pool       = %q
  hostname   = "fault-guest"
  phone_home = true
}
`, env.URI, port, port, prefix, env.Pool) + faultVM(env, "test", fmt.Sprintf("%q", prefix+"vm"), env.Pool, env.Base, faultUserNIC,
		"  seed_id  = kohaku_seed.test.id\n  wait_for = \""+waitFor+"\"\n"+vmExtra)
}

// A guest that never phones home: create fails at its timeout, the VM is
// kept tainted, and the host holds exactly the VM, its overlay and the
// seed. With the wait turned off the next apply replaces it and converges.
// (TestAccReady_timeoutKeepsTaintedVM is the same with a real guest boot.)
func TestAccFault_neverReady(t *testing.T) {
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "fnever")
	port := acctest.ClosedPort(t)
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{
			{
				Config:      faultWaitConfig(env, prefix, port, "phone_home", "  timeouts {\n    create = \"15s\"\n  }"),
				ExpectError: regexp.MustCompile(`(?s)` + regexp.QuoteMeta(prefix) + `vm.*failed at step\s+"wait for the guest to be ready".*timed\s+out.*tainted`),
			},
			{
				RefreshState:       true,
				ExpectNonEmptyPlan: true, // tainted: the next apply replaces it
				Check: resource.ComposeAggregateTestCheckFunc(
					func(s *terraform.State) error {
						if rs := s.RootModule().Resources["kohaku_vm.test"]; rs == nil || !rs.Primary.Tainted {
							return fmt.Errorf("the kept VM is not in state as tainted")
						}
						return nil
					},
					acctest.CheckDomState(env, prefix+"vm", "running"),
					faultCheckState(env, prefix),
				),
			},
			// The same VM waiting for nothing: replaced, converged (the
			// framework plans again after it and fails on a non-empty plan).
			{Config: faultWaitConfig(env, prefix, port, "none", ""), Check: faultCheckState(env, prefix)},
		},
	})
}

// The phone-home listener under a burst of wrong-token, oversized,
// malformed, wrong-method and slow requests while a VM waits on it: the
// real report (sent by the test, as the guest would, to the URL in the
// seed) still wakes the wait and the apply succeeds with the reported
// guest. TestAccReady_phoneHome does the same wait with a real guest.
func TestAccFault_phoneHomeBurst(t *testing.T) {
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "fburst")
	port := acctest.ClosedPort(t)
	var burst *faultBurst
	reported := make(chan error, 1)
	guest := func() {
		// Act as the guest once the domain runs (Create is waiting): read
		// the phone-home URL from the seed ISO, let the burst run, post.
		reported <- func() error {
			if !acctest.Poll(5*time.Minute, func() bool { return acctest.Domains(env, prefix)[prefix+"vm"] == "running" }) {
				return fmt.Errorf("the VM never ran")
			}
			iso := t.TempDir() + "/seed.iso"
			if out, err := acctest.Virsh(env.URI, "vol-download", "--pool", env.Pool, prefix+"seed.iso", iso); err != nil {
				return fmt.Errorf("%v: %s", err, out)
			}
			in, err := faultInspectISO(iso)
			if err != nil {
				return err
			}
			u := strings.Replace(in, "http://10.0.2.2:", "http://127.0.0.1:", 1)
			time.Sleep(8 * time.Second)
			resp, err := httpPostForm(u, "instance_id="+prefix+"vm&hostname=fault-guest&fqdn=fault-guest.local")
			if err != nil {
				return err
			}
			if resp != 200 {
				return fmt.Errorf("the real report got HTTP %d", resp)
			}
			return nil
		}()
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: protoV6Providers,
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{{
			PreConfig: func() {
				burst = startFaultBurst(t, port)
				go guest()
			},
			Config: faultWaitConfig(env, prefix, port, "phone_home", "  timeouts {\n    create = \"5m\"\n  }"),
			Check: resource.ComposeAggregateTestCheckFunc(
				func(*terraform.State) error {
					if err := <-reported; err != nil {
						return err
					}
					return burst.check(t)
				},
				resource.TestCheckResourceAttr("kohaku_vm.test", "guest.ready_via", "phone_home"),
				resource.TestCheckResourceAttr("kohaku_vm.test", "guest.hostname", "fault-guest"),
				faultCheckState(env, prefix),
			),
		}},
	})
}

// SIGINT while images upload: as for seeds, libvirtd never answers the
// uploads (the proxy holds them) once each volume exists; terraform stops,
// each create ends its upload's own connection and deletes the volume it
// made, and the host holds what state records (nothing). The next apply,
// with the uploads let through, converges.
func TestAccFault_sigintDuringImageUpload(t *testing.T) {
	env := acctest.NewVMEnv(t)
	acctest.NeedTerraform(t)
	prefix := vmTestPrefix(t, env, "fimg")
	disk := filepath.Join(t.TempDir(), "disk.raw")
	raw := make([]byte, 4<<20)
	raw[510], raw[511] = 0x55, 0xAA
	if err := os.WriteFile(disk, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	cache := t.TempDir()
	const n = 2
	faultSIGINTDuringUploads(t, env, prefix, n, "(the partial volume was deleted)", func(uri string) string {
		return fmt.Sprintf(`
provider "kohaku" {
  uri             = %q
  image_cache_dir = %q
}

resource "kohaku_image" "test" {
  count  = %d
  name   = "%s${count.index}.raw"
  pool   = %q
  source = %q
}
`, uri, cache, n, prefix, env.Pool, disk)
	})
}
