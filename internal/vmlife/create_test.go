package vmlife

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

func createPlan(h *fakeHost, name string) Plan {
	h.addVolume("images", "base.qcow2", "qcow2", 2<<30)
	return Plan{
		Spec: testSpec(name), Base: &domain.VolumeRef{Pool: "images", Volume: "base.qcow2"},
		Autostart: true, Running: true, Timeout: time.Minute,
	}
}

const baseOnly = "volume images/base.qcow2"

func TestCreateMakesEverything(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	view, err := Create(context.Background(), h, createPlan(h, "vm"))
	if err != nil {
		t.Fatal(err)
	}
	want := "domain vm active=true autostart=true\nvolume default/vm-root.qcow2\n" + baseOnly
	if got := h.state(); got != want {
		t.Errorf("host after create:\n%s\nwant:\n%s", got, want)
	}
	if !view.Status.Active || view.Overlay == nil || *view.Overlay != (domain.VolumeRef{Pool: "default", Volume: "vm-root.qcow2"}) {
		t.Errorf("view: active=%t overlay=%v", view.Status.Active, view.Overlay)
	}
	// The overlay is recorded in the domain's metadata, so a later read
	// without state still finds what to delete.
	if len(view.Owned) != 1 {
		t.Errorf("owned volumes %v", view.Owned)
	}
}

// Every create step's failure leaves the host as it was, and the error
// names the step and what was rolled back.
func TestCreateRollsBackEachStep(t *testing.T) {
	t.Parallel()
	boom := errors.New("injected")
	cases := []struct {
		name     string
		setup    func(h *fakeHost, p *Plan)
		step     string
		made     bool
		undone   []string
		wantErr  string
		wantLeft int
	}{
		{name: "name taken", step: StepCheckName, wantErr: "already exists",
			setup: func(h *fakeHost, p *Plan) { h.domains["vm"] = &fakeDomain{ref: domainRef("vm")} }},
		{name: "name lookup fails", step: StepCheckName, wantErr: "injected",
			setup: func(h *fakeHost, p *Plan) { h.fail["LookupDomain"] = boom }},
		{name: "overlay fails", step: StepOverlay, wantErr: "injected",
			setup: func(h *fakeHost, p *Plan) { h.fail["CreateOverlay"] = boom }},
		{name: "overlay outcome unknown", step: StepOverlay, made: true, wantErr: "connection reset",
			undone: []string{"deleted overlay volume default/vm-root.qcow2"},
			setup:  func(h *fakeHost, p *Plan) { h.fail["CreateOverlay"] = lost("create overlay") }},
		{name: "domain XML refused", step: StepXML, made: true, wantErr: "",
			undone: []string{"deleted overlay volume default/vm-root.qcow2"},
			setup:  func(h *fakeHost, p *Plan) { p.Spec.VCPU = 0 }},
		{name: "define fails", step: StepDefine, made: true, wantErr: "injected",
			undone: []string{"deleted overlay volume default/vm-root.qcow2"},
			setup:  func(h *fakeHost, p *Plan) { h.fail["DefineDomain"] = boom }},
		{name: "autostart fails", step: StepAutostart, made: true, wantErr: "injected",
			undone: []string{"undefined domain vm", "deleted overlay volume default/vm-root.qcow2"},
			setup:  func(h *fakeHost, p *Plan) { h.fail["SetAutostart"] = boom }},
		{name: "start fails", step: StepStart, made: true, wantErr: "injected",
			undone: []string{"undefined domain vm", "deleted overlay volume default/vm-root.qcow2"},
			setup:  func(h *fakeHost, p *Plan) { h.fail["StartDomain"] = boom }},
		{name: "domain dies at once", step: StepStart, made: true, wantErr: "stopped right after it started",
			undone: []string{"undefined domain vm", "deleted overlay volume default/vm-root.qcow2"},
			setup:  func(h *fakeHost, p *Plan) { h.startsDead = true }},
		{name: "ready fails", step: StepReady, made: true, wantErr: "injected",
			undone: []string{"undefined domain vm", "deleted overlay volume default/vm-root.qcow2"},
			setup:  func(h *fakeHost, p *Plan) { p.Ready = func(context.Context) error { return boom } }},
		{name: "read back fails", step: StepReadBack, made: true, wantErr: "injected",
			undone: []string{"undefined domain vm", "deleted overlay volume default/vm-root.qcow2"},
			setup:  func(h *fakeHost, p *Plan) { h.fail["ReadDomain"] = boom }},
		{name: "rollback cannot undefine", step: StepStart, made: true, wantErr: "injected", wantLeft: 1,
			undone: []string{"deleted overlay volume default/vm-root.qcow2"},
			setup: func(h *fakeHost, p *Plan) {
				h.fail["StartDomain"] = boom
				h.fail["UndefineDomain"] = errors.New("undefine refused")
			}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newFakeHost()
			p := createPlan(h, "vm")
			c.setup(h, &p)
			before := h.state()
			_, err := Create(context.Background(), h, p)
			var ce *CreateError
			if !errors.As(err, &ce) {
				t.Fatalf("error %v (%T), want a *CreateError", err, err)
			}
			if ce.Step != c.step || ce.Made != c.made || !strings.Contains(ce.Err.Error(), c.wantErr) {
				t.Errorf("step %q made=%t err %q; want step %q made=%t err containing %q", ce.Step, ce.Made, ce.Err, c.step, c.made, c.wantErr)
			}
			if strings.Join(ce.RolledBack, "; ") != strings.Join(c.undone, "; ") {
				t.Errorf("rolled back %q, want %q", ce.RolledBack, c.undone)
			}
			if len(ce.Left) != c.wantLeft {
				t.Fatalf("left %q, want %d", ce.Left, c.wantLeft)
			}
			if c.wantLeft == 0 {
				if got := h.state(); got != before {
					t.Errorf("host after the failed create:\n%s\nwant as before:\n%s", got, before)
				}
				return
			}
			// What could not be undone is reported with its command and
			// handed back so the state can keep it for destroy; what was
			// undone (the overlay) is not, so the state never claims a
			// volume the host no longer has.
			if !strings.Contains(ce.Left[0], "virsh undefine --nvram vm") || ce.Defined == nil || ce.Overlay != nil {
				t.Errorf("left %q defined=%v overlay=%v; want the domain only", ce.Left, ce.Defined, ce.Overlay)
			}
		})
	}
}

func domainRef(name string) virt.DomainRef {
	return virt.DomainRef{Name: name, UUID: "00000000-0000-4000-8000-00000000ffff"}
}

// A define whose outcome is unknown (connection lost mid-call) is looked up
// by name and removed if it happened.
func TestCreateRollsBackAnUnknownDefine(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	p := createPlan(h, "vm")
	before := h.state()
	hook := &definingHost{fakeHost: h}
	_, err := Create(context.Background(), hook, p)
	var ce *CreateError
	if !errors.As(err, &ce) || ce.Step != StepDefine {
		t.Fatalf("error %v", err)
	}
	if strings.Join(ce.RolledBack, "; ") != "undefined domain vm; deleted overlay volume default/vm-root.qcow2" {
		t.Errorf("rolled back %q", ce.RolledBack)
	}
	if got := h.state(); got != before {
		t.Errorf("host after the failed create:\n%s\nwant:\n%s", got, before)
	}
}

// definingHost defines the domain and then reports the connection lost.
type definingHost struct{ *fakeHost }

func (d *definingHost) DefineDomain(ctx context.Context, name, xml string) (virt.DomainRef, error) {
	if _, err := d.fakeHost.DefineDomain(ctx, name, xml); err != nil {
		return virt.DomainRef{}, err
	}
	return virt.DomainRef{}, lost("define domain")
}

func TestCreateKeepsAVMWhoseWaitFailed(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	p := createPlan(h, "vm")
	p.KeepOnReadyFailure = true
	p.Ready = func(context.Context) error { return errors.New("timed out") }
	_, err := Create(context.Background(), h, p)
	var ce *CreateError
	if !errors.As(err, &ce) || !ce.Kept || ce.Step != StepReady {
		t.Fatalf("error %#v", err)
	}
	if len(ce.RolledBack) != 0 || ce.View == nil || !ce.View.Status.Active || ce.Defined == nil {
		t.Errorf("kept VM: rolled back %q, view %v, defined %v", ce.RolledBack, ce.View, ce.Defined)
	}
	if !strings.Contains(h.state(), "domain vm active=true") {
		t.Errorf("the VM was not kept:\n%s", h.state())
	}
}

func TestCreateStopsWhenTheTimeoutRanOut(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	p := createPlan(h, "vm")
	ctx, cancel := context.WithCancel(context.Background())
	// The timeout runs out while the overlay is made.
	hook := &cancellingHost{fakeHost: h, cancel: cancel}
	before := h.state()
	_, err := Create(ctx, hook, p)
	var ce *CreateError
	if !errors.As(err, &ce) || ce.Step != StepDefine || !strings.Contains(ce.Err.Error(), "the create timeout (1m0s) ran out") {
		t.Fatalf("error %v", err)
	}
	if got := h.state(); got != before {
		t.Errorf("host after the timed-out create:\n%s\nwant:\n%s", got, before)
	}
}

type cancellingHost struct {
	*fakeHost
	cancel func()
}

func (c *cancellingHost) CreateOverlay(ctx context.Context, pool, name, basePool, baseName string, capacity int64) (*virt.VolumeDetail, error) {
	defer c.cancel()
	return c.fakeHost.CreateOverlay(ctx, pool, name, basePool, baseName, capacity)
}

// A call that hangs is bounded by the create's deadline, not by the host's
// call timeout, and an interrupt does not abandon a call halfway: the
// define that never answers ends at the deadline, and the rollback (whose
// outcome-unknown path looks the domain up) leaves the host as it was.
func TestCreateHungCallEndsAtTheDeadline(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	p := createPlan(h, "vm")
	before := h.state()
	hook := &hangingHost{fakeHost: h}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Create(ctx, hook, p)
	took := time.Since(start)
	var ce *CreateError
	if !errors.As(err, &ce) || ce.Step != StepDefine || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v", err)
	}
	if took > 2*time.Second {
		t.Errorf("the create returned after %s with a 300ms deadline", took)
	}
	if strings.Join(ce.RolledBack, "; ") != "deleted overlay volume default/vm-root.qcow2" {
		t.Errorf("rolled back %q", ce.RolledBack)
	}
	if got := h.state(); got != before {
		t.Errorf("host after the hung create:\n%s\nwant:\n%s", got, before)
	}
}

// The interrupt (a cancelled ctx without a deadline) lets a call that
// makes something finish.
func TestCreateInterruptLetsTheCallFinish(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	p := createPlan(h, "vm")
	ctx, cancel := context.WithCancel(context.Background())
	hook := &hangingHost{fakeHost: h, onDefine: cancel, release: 100 * time.Millisecond}
	_, err := Create(ctx, hook, p)
	var ce *CreateError
	if !errors.As(err, &ce) || ce.Step != StepAutostart {
		t.Fatalf("error %v (the define should have finished and the next step noticed the interrupt)", err)
	}
	if strings.Join(ce.RolledBack, "; ") != "undefined domain vm; deleted overlay volume default/vm-root.qcow2" {
		t.Errorf("rolled back %q", ce.RolledBack)
	}
}

// hangingHost's DefineDomain waits for ctx (or, with release, that long
// before defining), as a libvirtd that never answers would.
type hangingHost struct {
	*fakeHost
	onDefine func()
	release  time.Duration
}

func (h *hangingHost) DefineDomain(ctx context.Context, name, xml string) (virt.DomainRef, error) {
	if h.onDefine != nil {
		h.onDefine()
	}
	if h.release > 0 {
		select {
		case <-time.After(h.release):
			return h.fakeHost.DefineDomain(ctx, name, xml)
		case <-ctx.Done():
			return virt.DomainRef{}, ctx.Err()
		}
	}
	<-ctx.Done()
	return virt.DomainRef{}, ctx.Err()
}
