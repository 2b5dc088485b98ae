package provider

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-testing/helper/resource"
	"github.com/hashicorp/terraform-plugin-testing/terraform"

	"github.com/kohaku/terraform-provider-kohaku/internal/acctest"
	"github.com/kohaku/terraform-provider-kohaku/internal/hosts/libvirthost"
)

// applyRecorder keeps, for each ApplyResourceChange the provider served,
// the host's clock when it returned and its diagnostics: when a create
// returned, measured where Terraform gets the answer.
type applyRecorder struct {
	mu      sync.Mutex
	applies []appliedChange
}

type appliedChange struct {
	returned time.Time
	diags    []*tfprotov6.Diagnostic
}

// recordingServer is the provider with its applies recorded.
type recordingServer struct {
	tfprotov6.ProviderServer
	rec *applyRecorder
}

func (s recordingServer) ApplyResourceChange(ctx context.Context, req *tfprotov6.ApplyResourceChangeRequest) (*tfprotov6.ApplyResourceChangeResponse, error) {
	resp, err := s.ProviderServer.ApplyResourceChange(ctx, req)
	returned := time.Now()
	if resp != nil {
		s.rec.mu.Lock()
		s.rec.applies = append(s.rec.applies, appliedChange{returned: returned, diags: resp.Diagnostics})
		s.rec.mu.Unlock()
	}
	return resp, err
}

func (r *applyRecorder) providers() map[string]func() (tfprotov6.ProviderServer, error) {
	return map[string]func() (tfprotov6.ProviderServer, error){
		"kohaku": func() (tfprotov6.ProviderServer, error) {
			s, err := providerserver.NewProtocol6WithError(New("test", libvirthost.Connect)())()
			return recordingServer{ProviderServer: s, rec: r}, err
		},
	}
}

// failedCreate is the recorded create of vm that failed: when it returned
// and its error's detail.
func (r *applyRecorder) failedCreate(vm string) (time.Time, string, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, a := range r.applies {
		for _, d := range a.diags {
			if d.Severity == tfprotov6.DiagnosticSeverityError && strings.HasPrefix(d.Summary, "Creating VM "+vm+" failed") {
				return a.returned, d.Detail, true
			}
		}
	}
	return time.Time{}, "", false
}

// guestClockOffset is how far the guest's clock is ahead of the host's,
// read through the QEMU guest agent (guest-get-time) between two readings
// of the host's clock, with half the narrowest such window of five as its
// uncertainty.
func guestClockOffset(t *testing.T, uri, vm string) (offset, uncertainty time.Duration) {
	t.Helper()
	best := time.Duration(-1)
	for range 5 {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		before := time.Now()
		out, err := exec.CommandContext(ctx, "virsh", "-c", uri, "qemu-agent-command", vm, `{"execute":"guest-get-time"}`).Output()
		after := time.Now()
		cancel()
		if err != nil {
			t.Fatalf("reading the clock of %s through the guest agent: %v: %s", vm, err, out)
		}
		var r struct {
			Return int64 `json:"return"`
		}
		if err := json.Unmarshal(out, &r); err != nil || r.Return == 0 {
			t.Fatalf("guest-get-time of %s: %q (%v)", vm, out, err)
		}
		window := after.Sub(before)
		if best < 0 || window < best {
			best = window
			offset = time.Unix(0, r.Return).Sub(before.Add(window / 2))
		}
	}
	return offset, best / 2
}

var reportTimingRE = regexp.MustCompile(`Reported through (the channel|phone home): written by the guest at (\S+) \(guest clock\), received at (\S+) \(host clock\)\.`)

// A module that fails in a real guest fails the create, naming the module,
// whichever way the report comes: one guest reports through the libvirt
// channel, the other through phone home, booted together. And the failure
// is quick: create returns within a second of the guest writing its report.
//
// The figure: the report carries the guest's clock when it wrote it
// (sent_at), the failed create's diagnostic repeats it with the host's
// clock when the report arrived, and the test records when the create
// returned (ApplyResourceChange, host clock). The two clocks are compared
// through the guest agent (guest-get-time between two readings of the
// host's clock): the guest's clock comes from the emulated RTC at boot
// (whole seconds, no kvmclock under TCG), so the offset is measured, not
// assumed, and the latency is returned - (sent_at - offset), within the
// measurement's uncertainty. The host-only part, from the report's
// arrival to the create's return, is asserted too.
func TestAccReady_cloudInitErrorsThroughChannelAndPhoneHome(t *testing.T) {
	t.Parallel() // a real guest: its boot overlaps another test's (see testacc in GNUmakefile)
	env := acctest.NewVMEnv(t)
	prefix := vmTestPrefix(t, env, "rf")
	port := acctest.ClosedPort(t)
	wait := "  timeouts {\n    create = \"15m\"\n  }\n"
	type guest struct{ res, via, prefix, seed, vm string }
	guests := []guest{
		{"channel", "the channel", prefix + "c-", "", "  wait_for = \"channel\"\n" + wait},
		{"phone", "phone home", prefix + "p-", "  phone_home = true", "  wait_for = \"phone_home\"\n" + wait},
	}
	cfg := fmt.Sprintf(`
provider "kohaku" {
  uri = %q
  phone_home = {
    listen_address = "127.0.0.1:%d"
    base_url       = "http://10.0.2.2:%d"
  }
}
`, env.URI, port, port)
	for _, g := range guests {
		cfg += readyResources(env, g.prefix, t.TempDir(), g.res, "", g.seed, g.vm)
	}
	// The user's runcmd fails: cloud-init's scripts_user module reports it.
	cfg = strings.ReplaceAll(cfg, "      - sync\n", "      - sync\n      - exit 3\n")
	rec := &applyRecorder{}
	var failed []string
	for _, g := range guests {
		failed = append(failed, `Creating\s+VM\s+`+regexp.QuoteMeta(g.prefix)+`vm\s+failed\s+at\s+step\s+"wait\s+for\s+the\s+guest\s+to\s+be\s+ready"`)
	}
	resource.Test(t, resource.TestCase{
		ProtoV6ProviderFactories: rec.providers(),
		CheckDestroy:             acctest.CheckNothingLeft(env, prefix),
		Steps: []resource.TestStep{
			{
				Config: cfg,
				// Both fail; Terraform prints the two errors in either order.
				ExpectError: regexp.MustCompile(`(?s)` + failed[0] + `.*` + failed[1] + `|` + failed[1] + `.*` + failed[0]),
			},
			{
				PreConfig: func() {
					for _, g := range guests {
						checkFailureLatency(t, env, rec, g.prefix+"vm", g.via)
					}
				},
				// Both VMs were kept (on_ready_failure = "keep") and are
				// tainted; destroy removes them.
				RefreshState:       true,
				ExpectNonEmptyPlan: true,
				Check: func(s *terraform.State) error {
					for _, g := range guests {
						rs := s.RootModule().Resources["kohaku_vm."+g.res]
						if rs == nil || !rs.Primary.Tainted {
							return fmt.Errorf("kohaku_vm.%s is not in state as tainted: %+v", g.res, rs)
						}
					}
					return nil
				},
			},
		},
	})
}

// checkFailureLatency: vm's create failed naming the failing module, with
// its report come the expected way, and returned within a second of the
// guest writing the report.
func checkFailureLatency(t *testing.T, env acctest.VMEnv, rec *applyRecorder, vm, via string) {
	t.Helper()
	returned, detail, ok := rec.failedCreate(vm)
	if !ok {
		t.Errorf("%s: no failed create recorded", vm)
		return
	}
	if !regexp.MustCompile(`(?s)cloud-init in VM ` + regexp.QuoteMeta(vm) + ` finished with status "error":\n  - .*scripts[-_]user`).MatchString(detail) {
		t.Errorf("%s: the error does not name the failing module:\n%s", vm, detail)
	}
	m := reportTimingRE.FindStringSubmatch(detail)
	if m == nil || m[1] != via {
		t.Errorf("%s: the error does not say the report came through %s, written and received when:\n%s", vm, via, detail)
		return
	}
	sent, err1 := time.Parse(time.RFC3339Nano, m[2])
	received, err2 := time.Parse(time.RFC3339Nano, m[3])
	if err1 != nil || err2 != nil {
		t.Errorf("%s: times %q, %q: %v %v", vm, m[2], m[3], err1, err2)
		return
	}
	offset, unc := guestClockOffset(t, env.URI, vm)
	sentHost := sent.Add(-offset) // the guest's sent_at on the host's clock
	transit, latency, host := received.Sub(sentHost), returned.Sub(sentHost), returned.Sub(received)
	t.Logf("%s via %s: guest clock %+.3f s from the host's (±%.3f s, guest-get-time); report written %s (guest clock), received %s, create returned %s (host clock): "+
		"transit %.3f s, create returned %.3f s ±%.3f s after the guest wrote the report (%.3f s after it arrived; %.3f s uncorrected for the clock offset)",
		vm, via, offset.Seconds(), unc.Seconds(), m[2], m[3], returned.UTC().Format(time.RFC3339Nano),
		transit.Seconds(), latency.Seconds(), unc.Seconds(), host.Seconds(), returned.Sub(sent).Seconds())
	if latency >= time.Second {
		t.Errorf("%s: create returned %.3f s (±%.3f s) after the guest wrote its report, want under 1 s", vm, latency.Seconds(), unc.Seconds())
	}
	if host >= time.Second {
		t.Errorf("%s: create returned %.3f s after the report arrived, want under 1 s", vm, host.Seconds())
	}
	// The report cannot arrive before it was written: a transit below zero
	// beyond the uncertainty means the clocks were compared wrongly.
	if transit < -unc-10*time.Millisecond {
		t.Errorf("%s: the report arrived %.3f s before it was written (clock offset %+.3f s ±%.3f s): the clock comparison is wrong", vm, -transit.Seconds(), offset.Seconds(), unc.Seconds())
	}
}
