package vmlife

import (
	"context"
	"errors"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

func TestRestartsRules(t *testing.T) {
	t.Parallel()
	cases := []struct {
		want, active, redefined bool
		do                      string
	}{
		{want: true, active: true, redefined: true, do: "stop,start"},
		{want: true, active: true, redefined: false, do: ""},
		{want: true, active: false, redefined: true, do: "start"},
		{want: true, active: false, redefined: false, do: "start"},
		{want: false, active: true, redefined: true, do: "stop"},
		{want: false, active: true, redefined: false, do: "stop"},
		{want: false, active: false, redefined: true, do: ""},
		{want: false, active: false, redefined: false, do: ""},
	}
	for _, c := range cases {
		var got []string
		for _, p := range Restarts(c.want, c.active, c.redefined) {
			if p.Stop {
				got = append(got, "stop")
			} else {
				got = append(got, "start")
			}
			if p.Step == "" {
				t.Errorf("%+v: a power step without a name", c)
			}
		}
		if s := strings.Join(got, ","); s != c.do {
			t.Errorf("want=%t active=%t redefined=%t: %q, want %q", c.want, c.active, c.redefined, s, c.do)
		}
	}
}

// existing makes a running VM through Create and returns its change base.
func existing(t *testing.T, h *fakeHost) Change {
	t.Helper()
	p := createPlan(h, "vm")
	p.Autostart = false
	view, err := Create(context.Background(), h, p)
	if err != nil {
		t.Fatal(err)
	}
	h.ops = nil
	return Change{Ref: view.Status.DomainRef, Want: Want{Spec: p.Spec}, Prior: p.Spec, Overlay: view.Overlay, Running: true}
}

func powerOps(h *fakeHost) []string {
	var out []string
	for _, o := range h.ops {
		switch o {
		case "DefineDomain", "StopDomain", "StartDomain", "SetAutostart":
			out = append(out, o)
		}
	}
	return out
}

func TestUpdateRestartsOnlyWhatItMust(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		change func(ch *Change)
		ops    []string
		active bool
	}{
		{name: "nothing changes", change: func(*Change) {}, active: true},
		{name: "more memory restarts a running VM", change: func(ch *Change) { ch.Want.Spec.MemoryMiB = 256 },
			ops: []string{"DefineDomain", "StopDomain", "StartDomain"}, active: true},
		{name: "stop", change: func(ch *Change) { ch.Running = false }, ops: []string{"StopDomain"}},
		{name: "stop with a new definition does not start", change: func(ch *Change) { ch.Running = false; ch.Want.Spec.VCPU = 2 },
			ops: []string{"DefineDomain", "StopDomain"}},
		{name: "autostart alone", change: func(ch *Change) { ch.Autostart = true }, ops: []string{"SetAutostart"}, active: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newFakeHost()
			ch := existing(t, h)
			c.change(&ch)
			var recorded []GPUGroups
			ch.Record = func(g GPUGroups) { recorded = append(recorded, g) }
			view, err := Update(context.Background(), h, ch)
			if err != nil {
				t.Fatal(err)
			}
			if got := powerOps(h); !reflect.DeepEqual(got, c.ops) {
				t.Errorf("operations %q, want %q", got, c.ops)
			}
			if view.Status.Active != c.active {
				t.Errorf("active %t, want %t", view.Status.Active, c.active)
			}
			if len(recorded) != 2 {
				t.Errorf("GPU groups recorded %d times, want before and after", len(recorded))
			}
			if c.ops != nil && c.ops[0] == "DefineDomain" && view.Status.UUID != ch.Ref.UUID {
				t.Errorf("redefined with another UUID %s", view.Status.UUID)
			}
		})
	}
}

// A VM stopped outside Terraform is started, without a redefine.
func TestUpdateStartsAStoppedVM(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	ch := existing(t, h)
	h.domains["vm"].active = false
	if _, err := Update(context.Background(), h, ch); err != nil {
		t.Fatal(err)
	}
	if got := powerOps(h); !reflect.DeepEqual(got, []string{"StartDomain"}) {
		t.Errorf("operations %q", got)
	}
}

// A stop or restart that had to force the guest off says so, with the
// grace it gave; one that powered off cleanly, or was given no grace (so
// forcing was what was asked for), says nothing.
func TestUpdateSaysWhenItForcedTheGuestOff(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		deaf   bool
		grace  time.Duration
		change func(ch *Change)
		told   []time.Duration
	}{
		{name: "stop, guest ignores the request", deaf: true, grace: 7 * time.Second,
			change: func(ch *Change) { ch.Running = false }, told: []time.Duration{7 * time.Second}},
		{name: "restart, guest ignores the request", deaf: true, grace: 7 * time.Second,
			change: func(ch *Change) { ch.Want.Spec.MemoryMiB = 256 }, told: []time.Duration{7 * time.Second}},
		{name: "stop, guest powers off", grace: 7 * time.Second, change: func(ch *Change) { ch.Running = false }},
		{name: "restart, guest powers off", grace: 7 * time.Second, change: func(ch *Change) { ch.Want.Spec.MemoryMiB = 256 }},
		{name: "stop with no grace", deaf: true, change: func(ch *Change) { ch.Running = false }},
		{name: "no stop", deaf: true, grace: 7 * time.Second, change: func(ch *Change) { ch.Autostart = true }},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newFakeHost()
			ch := existing(t, h)
			h.deaf = c.deaf
			ch.Grace = c.grace
			c.change(&ch)
			var told []time.Duration
			ch.ForcedOff = func(g time.Duration) { told = append(told, g) }
			if _, err := Update(context.Background(), h, ch); err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(told, c.told) {
				t.Errorf("ForcedOff told %v, want %v", told, c.told)
			}
		})
	}
	note := ForcedOffNote(7*time.Second, 7*time.Second)
	for _, want := range []string{"shutdown_timeout (7s)", "forced off", "systemd-logind", "dbus"} {
		if !strings.Contains(note, want) {
			t.Errorf("ForcedOffNote lacks %q: %s", want, note)
		}
	}
	// Cut short by the operation's timeout: the note says how long the
	// guest had and which timeout to raise, not that shutdown_timeout ran out.
	note = ForcedOffNote(30*time.Minute, 9*time.Minute+50*time.Second)
	for _, want := range []string{"within 9m50s", "shorter than shutdown_timeout (30m0s)", "timeouts (update, delete)"} {
		if !strings.Contains(note, want) {
			t.Errorf("ForcedOffNote (cut short) lacks %q: %s", want, note)
		}
	}
}

// A stop waits for the guest no longer than the operation's timeout
// allows, keeping virt.StopForceMargin for the forced stop.
func TestStopGrace(t *testing.T) {
	t.Parallel()
	if g := StopGrace(context.Background(), time.Minute); g != time.Minute {
		t.Errorf("no deadline: %s, want 1m", g)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	if g := StopGrace(ctx, time.Minute); g != time.Minute {
		t.Errorf("deadline far off: %s, want 1m", g)
	}
	g := StopGrace(ctx, 30*time.Minute)
	if g > 10*time.Minute-virt.StopForceMargin || g < 10*time.Minute-virt.StopForceMargin-time.Minute {
		t.Errorf("deadline in 10m: %s, want just under %s", g, 10*time.Minute-virt.StopForceMargin)
	}
	short, cancel2 := context.WithTimeout(context.Background(), time.Second)
	defer cancel2()
	if g := StopGrace(short, time.Minute); g != 0 {
		t.Errorf("deadline inside the margin: %s, want 0", g)
	}
}

func TestUpdateFailures(t *testing.T) {
	t.Parallel()
	boom := errors.New("injected")
	t.Run("a failed restart reports the domain as it is", func(t *testing.T) {
		t.Parallel()
		h := newFakeHost()
		ch := existing(t, h)
		ch.Want.Spec.MemoryMiB = 256
		h.fail["StartDomain"] = boom
		_, err := Update(context.Background(), h, ch)
		var ue *UpdateError
		if !errors.As(err, &ue) || ue.Step != "start the domain with the new definition" || ue.Unchanged {
			t.Fatalf("error %#v", err)
		}
		if ue.View == nil || ue.View.Status.Active || ue.View.Observed.Spec.MemoryMiB != 256 {
			t.Errorf("view after the failure: %+v", ue.View)
		}
	})
	t.Run("a missing shared folder changes nothing", func(t *testing.T) {
		t.Parallel()
		h := newFakeHost()
		h.transport = virt.TransportUnix
		ch := existing(t, h)
		ch.Want.Spec.SharedFolders = sharedFolders(filepath.Join(t.TempDir(), "missing"))
		_, err := Update(context.Background(), h, ch)
		var ue *UpdateError
		var se *ShareError
		if !errors.As(err, &ue) || !ue.Unchanged || ue.Step != StepShares || !errors.As(err, &se) || se.Index != 0 {
			t.Fatalf("error %#v", err)
		}
		if got := powerOps(h); len(got) != 0 {
			t.Errorf("operations after a refused update: %q", got)
		}
	})
	t.Run("a domain removed outside Terraform", func(t *testing.T) {
		t.Parallel()
		h := newFakeHost()
		ch := existing(t, h)
		delete(h.domains, "vm")
		_, err := Update(context.Background(), h, ch)
		if !errors.Is(err, virt.ErrDomainNotFound) || !strings.Contains(err.Error(), "run terraform apply again") {
			t.Fatalf("error %v", err)
		}
	})
}

func TestDeleteShutsDownAndSparesProtected(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	ch := existing(t, h)
	h.addVolume("default", "seed.iso", "raw", 1<<20)
	done, err := Delete(context.Background(), h, Doomed{Ref: ch.Ref, Overlay: ch.Overlay})
	if err != nil {
		t.Fatal(err)
	}
	if got := h.state(); got != "volume default/seed.iso\n"+baseOnly {
		t.Errorf("host after delete:\n%s", got)
	}
	if got := powerOps(h); !reflect.DeepEqual(got, []string{"StopDomain"}) || done.Forced {
		t.Errorf("operations %q forced=%t", got, done.Forced)
	}
	// The overlay recorded as owned is protected when it is the base.
	h2 := newFakeHost()
	ch2 := existing(t, h2)
	done, err = Delete(context.Background(), h2, Doomed{Ref: ch2.Ref, Overlay: ch2.Overlay, Protected: []domain.VolumeRef{*ch2.Overlay}})
	if err != nil || len(done.Spared) != 1 || !strings.Contains(h2.state(), "volume default/vm-root.qcow2") {
		t.Errorf("protected volume: err %v spared %v host %s", err, done.Spared, h2.state())
	}
}

// Destroy asks the guest to shut down only when something it writes
// outlives it; otherwise the guest is powered off at once.
func TestDeleteWaitsOnlyWhenDataOutlivesTheVM(t *testing.T) {
	t.Parallel()
	const timeout = 30 * time.Second
	for _, c := range []struct {
		name      string
		shares    []domain.SharedFolder
		mode      DestroyMode
		wantGrace time.Duration
		why       string
	}{
		{"overlay only", nil, DestroyAuto, 0, "every disk goes with the VM"},
		{"writable share", sharedFolders("/srv/data"), DestroyAuto, timeout, "shared folder /srv/data"},
		{"read-only share", []domain.SharedFolder{{Driver: domain.Share9p, Source: "/srv/ro", Tag: "ro", AccessMode: domain.AccessMapped, ReadOnly: true}}, DestroyAuto, 0, "every disk"},
		{"graceful asked for", nil, DestroyGraceful, timeout, "graceful"},
		{"force asked for", sharedFolders("/srv/data"), DestroyForce, 0, "force"},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newFakeHost()
			p := createPlan(h, "vm")
			p.Spec.SharedFolders = c.shares
			view, err := Create(context.Background(), h, p)
			if err != nil {
				t.Fatal(err)
			}
			done, err := Delete(context.Background(), h, Doomed{Ref: view.Status.DomainRef, Overlay: view.Overlay, Mode: c.mode, ShutdownTimeout: timeout})
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(h.graces, []time.Duration{c.wantGrace}) || done.Grace != c.wantGrace || !strings.Contains(done.Why, c.why) {
				t.Errorf("StopDomain graces %v, done %v (%q); want %v (...%s...)", h.graces, done.Grace, done.Why, c.wantGrace, c.why)
			}
			if done.Forced {
				t.Errorf("a guest given no grace is not reported as 'did not power off in time'")
			}
			if c.wantGrace > 0 {
				// The same destroy of a guest that ignores the request.
				h := newFakeHost()
				h.deaf = true
				p := createPlan(h, "vm")
				p.Spec.SharedFolders = c.shares
				view, err := Create(context.Background(), h, p)
				if err != nil {
					t.Fatal(err)
				}
				done, err := Delete(context.Background(), h, Doomed{Ref: view.Status.DomainRef, Overlay: view.Overlay, Mode: c.mode, ShutdownTimeout: timeout})
				if err != nil || !done.Forced || done.Grace != c.wantGrace {
					t.Errorf("a guest that ignored the request for %v: forced %t grace %v err %v", c.wantGrace, done.Forced, done.Grace, err)
				}
			}
			if got := h.state(); got != baseOnly {
				t.Errorf("host after delete:\n%s", got)
			}
		})
	}
}

func TestSurvivors(t *testing.T) {
	t.Parallel()
	owned := []domain.VolumeRef{{Pool: "default", Volume: "vm-root.qcow2"}}
	spec := domain.Spec{Disk: &domain.Disk{Source: domain.Source{Pool: "default", Volume: "vm-root.qcow2"}}}
	if got := Survivors(spec, owned); len(got) != 0 {
		t.Errorf("an owned overlay outlives nothing: %q", got)
	}
	spec.Disk.Volume = "data.qcow2"
	spec.SharedFolders = append(sharedFolders("/a"), domain.SharedFolder{Source: "/ro", ReadOnly: true})
	want := []string{"boot volume default/data.qcow2", "shared folder /a"}
	if got := Survivors(spec, owned); !reflect.DeepEqual(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
	spec.Disk = &domain.Disk{Source: domain.Source{Path: "/var/lib/vm/disk.img"}}
	if got := Survivors(spec, owned); len(got) == 0 || got[0] != "boot disk /var/lib/vm/disk.img" {
		t.Errorf("a disk file outlives the VM: %q", got)
	}
}

func TestDeleteFailureNamesTheStep(t *testing.T) {
	t.Parallel()
	h := newFakeHost()
	ch := existing(t, h)
	h.fail["UndefineDomain"] = errors.New("injected")
	_, err := Delete(context.Background(), h, Doomed{Ref: ch.Ref, Overlay: ch.Overlay})
	var se *StepError
	if !errors.As(err, &se) || se.Step != "undefine" {
		t.Fatalf("error %v", err)
	}
	if !strings.Contains(h.state(), "volume default/vm-root.qcow2") {
		t.Errorf("the overlay was deleted before the domain was gone:\n%s", h.state())
	}
}

func sharedFolders(src string) []domain.SharedFolder {
	return []domain.SharedFolder{{Driver: domain.Share9p, Source: src, Tag: "data", AccessMode: domain.AccessPassthrough}}
}
