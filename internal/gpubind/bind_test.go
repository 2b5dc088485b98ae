package gpubind

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// fakeHost serves the node devices of internal/vfio/testdata/nested-l1 (a
// VGA + HD-audio pair in IOMMU group 9 standing in for a GPU) and moves
// functions between drivers as libvirt's detach and reattach would.
type fakeHost struct {
	xml      map[string]string // node device name -> XML as recorded
	driver   map[string]string // node device name -> current driver
	original map[string]string
	// fail injects errors: "detach <name>", "reattach <name>", "read <name>",
	// "users", "list"; stuck names a function a detach leaves on its driver.
	fail  map[string]error
	stuck string
	ops   []string
	users map[string][]string
	// methods are the functions' reset_method files, by address.
	methods map[string]string
}

var driverRE = regexp.MustCompile(`(?s)<driver>.*?</driver>`)

func newFakeHost(t *testing.T) *fakeHost {
	t.Helper()
	h := &fakeHost{xml: map[string]string{}, driver: map[string]string{}, original: map[string]string{}, fail: map[string]error{}}
	files, err := filepath.Glob(filepath.Join("..", "vfio", "testdata", "nested-l1", "*.xml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("fixtures: %v", err)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		d, err := vfio.ParseDevice(string(b))
		if err != nil {
			t.Fatal(err)
		}
		name := vfio.NodeDeviceName(d.Address)
		h.xml[name], h.driver[name], h.original[name] = string(b), d.Driver, d.Driver
	}
	return h
}

func (h *fakeHost) render(name string) string {
	drv := ""
	if d := h.driver[name]; d != "" {
		drv = "<driver><name>" + d + "</name></driver>"
	}
	x := h.xml[name]
	if driverRE.MatchString(x) {
		return driverRE.ReplaceAllString(x, drv)
	}
	return strings.Replace(x, "<capability", drv+"<capability", 1)
}

func (h *fakeHost) PCINodeDevices(context.Context) ([]string, error) {
	if err := h.fail["list"]; err != nil {
		return nil, err
	}
	var out []string
	for name := range h.xml {
		out = append(out, h.render(name))
	}
	return out, nil
}

func (h *fakeHost) NodeDeviceXML(_ context.Context, name string) (string, error) {
	if err := h.fail["read "+name]; err != nil {
		return "", err
	}
	if _, ok := h.xml[name]; !ok {
		return "", fmt.Errorf("node device %s: %w", name, virt.ErrNotFound)
	}
	return h.render(name), nil
}

func (h *fakeHost) DetachNodeDevice(_ context.Context, name, driver string) error {
	h.ops = append(h.ops, "detach "+name)
	if err := h.fail["detach "+name]; err != nil {
		return err
	}
	if name != h.stuck {
		h.driver[name] = "vfio-pci"
	}
	return nil
}

func (h *fakeHost) ReattachNodeDevice(_ context.Context, name string) error {
	h.ops = append(h.ops, "reattach "+name)
	if err := h.fail["reattach "+name]; err != nil {
		return err
	}
	h.driver[name] = h.original[name]
	return nil
}

func (h *fakeHost) PCIHostdevUsers(context.Context) (map[string][]string, error) {
	if err := h.fail["users"]; err != nil {
		return nil, err
	}
	return h.users, nil
}

const (
	gpu   = "pci_0000_03_00_0"
	audio = "pci_0000_03_00_1"
)

// plan plans the binding of the GPU stand-in and its audio function.
func plan(t *testing.T, h *fakeHost) *vfio.Plan {
	t.Helper()
	inv, err := Binder{Host: h}.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p, err := vfio.PlanBinding(inv, mustAddr("0000:03:00.0"), vfio.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Bind) != 2 {
		t.Fatalf("the fixture's group plans %d functions, want the pair", len(p.Bind))
	}
	return p
}

func (h *fakeHost) drivers() string {
	return h.driver[gpu] + "," + h.driver[audio]
}

func TestBindMovesTheGroupAndRecordsDrivers(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	before := h.drivers()
	var logged int
	bound, err := Binder{Host: h, Log: func(string, map[string]any) { logged++ }}.Bind(context.Background(), plan(t, h).Bind)
	if err != nil {
		t.Fatal(err)
	}
	if h.drivers() != "vfio-pci,vfio-pci" || logged != 2 {
		t.Errorf("drivers %s, %d logged", h.drivers(), logged)
	}
	if got := bound[0].Original + "," + bound[1].Original; got != before || bound[0].Driver != "vfio-pci" {
		t.Errorf("original drivers %s, want %s; current %s", got, before, bound[0].Driver)
	}
}

// Each step of binding failing gives back what was bound before it.
func TestBindGivesBackOnEachFailure(t *testing.T) {
	t.Parallel()
	boom := errors.New("injected")
	cases := []struct {
		name     string
		setup    func(h *fakeHost)
		err      []string
		giveBack []string
	}{
		{name: "first detach", setup: func(h *fakeHost) { h.fail["detach "+gpu] = boom },
			err: []string{"0000:03:00.0", "injected", "Nothing was changed."}},
		{name: "second detach", setup: func(h *fakeHost) { h.fail["detach "+audio] = boom },
			err: []string{"0000:03:00.1", "injected", "given back to the host (0000:03:00.0)"}, giveBack: []string{"reattach " + gpu}},
		{name: "read after detach", setup: func(h *fakeHost) { h.fail["read "+audio] = boom },
			err: []string{"0000:03:00.1", "injected", "given back to the host (0000:03:00.1, 0000:03:00.0)"}, giveBack: []string{"reattach " + audio, "reattach " + gpu}},
		{name: "detach that does not land on vfio-pci", setup: func(h *fakeHost) { h.stuck = audio },
			err: []string{"libvirt reported success but the function is on", "modprobe vfio-pci"}, giveBack: []string{"reattach " + gpu}},
		{name: "give back fails too", setup: func(h *fakeHost) {
			h.fail["detach "+audio] = boom
			h.fail["reattach "+gpu] = errors.New("busy")
		}, err: []string{"Rolling back FAILED", "0000:03:00.0: busy", "virsh nodedev-reattach " + gpu}, giveBack: []string{"reattach " + gpu}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			h := newFakeHost(t)
			p := plan(t, h)
			before := h.drivers()
			c.setup(h)
			_, err := Binder{Host: h}.Bind(context.Background(), p.Bind)
			var be *BindError
			if !errors.As(err, &be) {
				t.Fatalf("error %v, want a *BindError", err)
			}
			for _, want := range c.err {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("%q does not say %q", err, want)
				}
			}
			var reattached []string
			for _, op := range h.ops {
				if strings.HasPrefix(op, "reattach") {
					reattached = append(reattached, op)
				}
			}
			if !reflect.DeepEqual(reattached, c.giveBack) {
				t.Errorf("gave back %q, want %q", reattached, c.giveBack)
			}
			// What the rollback could not give back is named in Left, for
			// the caller to record: exactly the functions left on vfio-pci.
			var left []string
			for _, l := range be.Left {
				left = append(left, vfio.NodeDeviceName(l.Address))
			}
			var onVFIO []string
			for _, name := range []string{gpu, audio} {
				if h.driver[name] == "vfio-pci" && h.original[name] != "vfio-pci" {
					onVFIO = append(onVFIO, name)
				}
			}
			if !reflect.DeepEqual(left, onVFIO) {
				t.Errorf("Left names %q, but %q are on vfio-pci", left, onVFIO)
			}
			if c.name != "give back fails too" && h.drivers() != before {
				t.Errorf("drivers after the failure %s, want %s", h.drivers(), before)
			}
			if c.name == "give back fails too" && len(left) != 1 {
				t.Errorf("a failed give-back left %q, want the GPU", left)
			}
		})
	}
}

// A function already on vfio-pci is neither detached nor given back.
func TestBindLeavesWhatWasBound(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	h.driver[gpu] = "vfio-pci"
	p := plan(t, h)
	h.fail["detach "+audio] = errors.New("injected")
	if _, err := (Binder{Host: h}).Bind(context.Background(), p.Bind); err == nil {
		t.Fatal("no error")
	}
	if strings.Join(h.ops, ";") != "detach "+audio || h.driver[gpu] != "vfio-pci" {
		t.Errorf("operations %q, gpu on %s", h.ops, h.driver[gpu])
	}
}

func TestRebindKeepsOriginalDrivers(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	b := Binder{Host: h}
	if _, err := b.Bind(context.Background(), plan(t, h).Bind); err != nil {
		t.Fatal(err)
	}
	// The audio function fell back to the host; the record says where the
	// pair came from.
	h.driver[audio] = h.original[audio]
	known := map[string]string{"0000:03:00.0": h.original[gpu], "0000:03:00.1": h.original[audio]}
	p := plan(t, h)
	if !NeedsBinding(p.Bind) {
		t.Fatal("a function off vfio-pci needs no binding")
	}
	h.ops = nil
	bound, err := b.Rebind(context.Background(), p.Bind, known)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(h.ops, ";") != "detach "+audio {
		t.Errorf("operations %q, want the audio function alone", h.ops)
	}
	if bound[0].Original != h.original[gpu] || bound[1].Original != h.original[audio] || bound[1].Driver != "vfio-pci" {
		t.Errorf("bound %+v %+v", bound[0], bound[1])
	}
	if NeedsBinding(plan(t, h).Bind) {
		t.Error("the whole group is on vfio-pci and still needs binding")
	}
}

func TestReleaseGivesEverythingBack(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	b := Binder{Host: h}
	p := plan(t, h)
	if _, err := b.Bind(context.Background(), p.Bind); err != nil {
		t.Fatal(err)
	}
	addrs := p.Addresses()
	original := map[vfio.Address]string{addrs[0]: h.original[gpu], addrs[1]: "some-other-driver"}
	h.ops = nil
	notes, failed := b.Release(context.Background(), append(addrs, mustAddr("0000:7f:00.0")), original)
	if len(failed) != 0 {
		t.Fatalf("failed %q", failed)
	}
	if strings.Join(h.ops, ";") != "reattach "+audio+";reattach "+gpu {
		t.Errorf("operations %q, want last first", h.ops)
	}
	if len(notes) != 2 || !strings.Contains(notes[0], "0000:7f:00.0 is no longer on the host") || !strings.Contains(notes[1], "not its original some-other-driver") {
		t.Errorf("notes %q", notes)
	}
	// Already given back: nothing to do.
	h.ops = nil
	if notes, failed := b.Release(context.Background(), addrs, nil); len(h.ops) != 0 || len(notes)+len(failed) != 0 {
		t.Errorf("second release: ops %q notes %q failed %q", h.ops, notes, failed)
	}
}

func TestReleaseReportsWhatStaysBound(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	b := Binder{Host: h}
	p := plan(t, h)
	if _, err := b.Bind(context.Background(), p.Bind); err != nil {
		t.Fatal(err)
	}
	h.fail["reattach "+gpu] = errors.New("device busy")
	h.fail["read "+audio] = errors.New("connection lost")
	_, failed := b.Release(context.Background(), p.Addresses(), nil)
	if len(failed) != 2 || !strings.Contains(failed[0], "0000:03:00.1: reading its state: connection lost") || !strings.Contains(failed[1], "0000:03:00.0: device busy") {
		t.Errorf("failed %q", failed)
	}
}

func TestCheckNotInUse(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	b := Binder{Host: h}
	addrs := plan(t, h).Addresses()
	if err := b.CheckNotInUse(context.Background(), addrs); err != nil {
		t.Errorf("unused: %v", err)
	}
	h.users = map[string][]string{"0000:03:00.1": {"other-vm"}}
	var inUse *vfio.InUseError
	if err := b.CheckNotInUse(context.Background(), addrs); !errors.As(err, &inUse) || !strings.Contains(err.Error(), "other-vm") {
		t.Errorf("in use: %v", err)
	}
	h.fail["users"] = errors.New("injected")
	var ue *UsersError
	if err := b.CheckNotInUse(context.Background(), addrs); !errors.As(err, &ue) {
		t.Errorf("cannot ask: %v", err)
	}
}

func mustAddr(s string) vfio.Address {
	a, err := vfio.ParseAddress(s)
	if err != nil {
		panic(err)
	}
	return a
}

// ReadBack reads each function's driver now; one that cannot be read keeps
// what was known of it.
func TestReadBack(t *testing.T) {
	h := newFakeHost(t)
	p := plan(t, h)
	b := Binder{Host: h}
	bound, err := b.Bind(context.Background(), p.Bind)
	if err != nil {
		t.Fatal(err)
	}
	// Someone gives the first function back by hand; the second cannot be read.
	first, second := vfio.NodeDeviceName(bound[0].Address), vfio.NodeDeviceName(bound[1].Address)
	h.driver[first] = h.original[first]
	h.fail["read "+second] = errors.New("connection lost")
	got := b.ReadBack(context.Background(), bound)
	if len(got) != 2 {
		t.Fatalf("ReadBack returned %d functions, want 2", len(got))
	}
	if got[0].Driver != h.original[first] || got[0].Original != bound[0].Original {
		t.Errorf("first: driver %q original %q, want %q and %q", got[0].Driver, got[0].Original, h.original[first], bound[0].Original)
	}
	if got[1].Driver != vfio.DriverVFIO || got[1].Device != bound[1].Device {
		t.Errorf("second (unreadable): driver %q, want the known %q kept", got[1].Driver, vfio.DriverVFIO)
	}
}
