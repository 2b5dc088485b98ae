package mdev

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestParentNodeName(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"0000:41:00.0":       "pci_0000_41_00_0",
		"0000:0A:1f.7":       "pci_0000_0a_1f_7",
		"mtty_mtty":          "mtty_mtty",
		"pci_0000_41_00_0":   "pci_0000_41_00_0",
		"  css_0_0_0052  ":   "css_0_0_0052",
		"0000:41:00.8":       "0000:41:00.8", // not a PCI address: taken as a name
		"ap_matrix_whatever": "ap_matrix_whatever",
	} {
		if got := ParentNodeName(in); got != want {
			t.Errorf("ParentNodeName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestParentAddress(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"pci_0000_41_00_0": "0000:41:00.0", "mtty_mtty": "", "pci_0000_41_00": ""} {
		if got := ParentAddress(in); got != want {
			t.Errorf("ParentAddress(%q) = %q, want %q", in, got, want)
		}
		if want != "" && ParentNodeName(want) != in {
			t.Errorf("ParentNodeName(%q) = %q, want %q", want, ParentNodeName(want), in)
		}
	}
}

func TestRenderDefinitionGolden(t *testing.T) {
	t.Parallel()
	got, err := RenderDefinition(Spec{Parent: "mtty_mtty", Type: "mtty-2", UUID: "6b6f6861-6b75-4d64-8000-000000000001"})
	if err != nil {
		t.Fatal(err)
	}
	golden := filepath.Join("testdata", "definition.xml")
	if *update {
		if err := os.WriteFile(golden, []byte(got+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if want := readTestdata(t, "definition.xml"); got+"\n" != want {
		t.Errorf("rendered:\n%s\nwant (%s):\n%s", got, golden, want)
	}
	// and it reads back as what was rendered
	d, err := ParseDevice(got)
	if err != nil {
		t.Fatal(err)
	}
	if d.Parent != "mtty_mtty" || d.Type != "mtty-2" || d.UUID != "6b6f6861-6b75-4d64-8000-000000000001" || d.IOMMUGroup != -1 {
		t.Errorf("read back %+v", d)
	}
}

func TestRenderDefinitionRefusesBadUUID(t *testing.T) {
	t.Parallel()
	for _, u := range []string{"", "6B6F6861-6B75-4D64-8000-000000000001", "6b6f68616b754d648000000000000001", "6b6f6861-6b75-4d64-8000-00000000000"} {
		if _, err := RenderDefinition(Spec{Parent: "mtty_mtty", Type: "mtty-2", UUID: u}); err == nil {
			t.Errorf("uuid %q was accepted", u)
		}
	}
}

func TestParseDevice(t *testing.T) {
	t.Parallel()
	d, err := ParseDevice(readTestdata(t, "device_active.xml"))
	if err != nil {
		t.Fatal(err)
	}
	want := Device{Name: "mdev_6b6f6861_6b75_4d64_8000_00000000aaaa_mtty", Parent: "mtty_mtty", Type: "mtty-2",
		UUID: "6b6f6861-6b75-4d64-8000-00000000aaaa", IOMMUGroup: 11}
	if d != want {
		t.Errorf("got %+v\nwant %+v", d, want)
	}
	// the same device stopped (defined, not active): no path, no driver
	if d, err := ParseDevice(readTestdata(t, "device_defined.xml")); err != nil || d != want {
		t.Errorf("stopped: got %+v, %v\nwant %+v", d, err, want)
	}
	if _, err := ParseDevice(readTestdata(t, "parent_pci.xml")); err == nil || !strings.Contains(err.Error(), "not a mediated device") {
		t.Errorf("a PCI device read as a mediated device: %v", err)
	}
}

func TestParseParent(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file, name, offers string
	}{
		// the kernel's sample parent: mdev_types at the top of the device,
		// twice over (libvirt 9.0's nodedev-dumpxml, with one mtty-2 started)
		{"parent_mtty.xml", "mtty_mtty", "mtty-1 (22 available), mtty-2 (11 available)"},
		// a vGPU card: mdev_types nested in the pci capability
		{"parent_pci.xml", "pci_0000_41_00_0", "nvidia-222 (16 available), nvidia-230 (1 available)"},
		{"device_active.xml", "mdev_6b6f6861_6b75_4d64_8000_00000000aaaa_mtty", "no mediated device types"},
	} {
		p, err := ParseParent(readTestdata(t, tc.file))
		if err != nil {
			t.Fatal(err)
		}
		if p.Name != tc.name || p.Offers() != tc.offers {
			t.Errorf("%s: %s offers %q, want %s offering %q", tc.file, p.Name, p.Offers(), tc.name, tc.offers)
		}
	}
	p, _ := ParseParent(readTestdata(t, "parent_pci.xml"))
	if ty := p.Lookup("nvidia-230"); ty == nil || ty.Name != "GRID T4-16Q" || ty.DeviceAPI != "vfio-pci" {
		t.Errorf("nvidia-230 read as %+v", ty)
	}
}

// fakeHost is a libvirt host with node devices in memory: the parents as
// their XML, and mediated devices by node-device name.
type fakeHost struct {
	parents map[string]string
	mdevs   map[string]*fakeMdev
	calls   []string
	fail    map[string]error // by call name
	// lag is how many more state reads see a started device as stopped,
	// as libvirt does until udev tells it of the start
	lag int
}

type fakeMdev struct {
	doc                           string
	active, persistent, autostart bool
}

func newFakeHost(t *testing.T) *fakeHost {
	return &fakeHost{
		parents: map[string]string{
			// mtty with no mtty-2 left
			"mtty_mtty":        strings.Replace(readTestdata(t, "parent_mtty.xml"), "<availableInstances>11<", "<availableInstances>0<", 1),
			"pci_0000_41_00_0": readTestdata(t, "parent_pci.xml"),
		},
		mdevs: map[string]*fakeMdev{},
		fail:  map[string]error{},
	}
}

func (h *fakeHost) call(name string) error {
	h.calls = append(h.calls, name)
	return h.fail[name]
}

func (h *fakeHost) NodeDeviceXML(_ context.Context, name string) (string, error) {
	if err := h.call("xml"); err != nil {
		return "", err
	}
	if doc, ok := h.parents[name]; ok {
		return doc, nil
	}
	if m, ok := h.mdevs[name]; ok {
		return m.doc, nil
	}
	if name == "pci_0000_00_01_0" { // a PCI device with no mdev types
		return "<device><name>pci_0000_00_01_0</name><capability type='pci'><domain>0</domain></capability></device>", nil
	}
	return "", fmt.Errorf("node device %s %w", name, virt.ErrNotFound)
}

func (h *fakeHost) MdevNodeDevices(context.Context) ([]string, error) {
	if err := h.call("list"); err != nil {
		return nil, err
	}
	var out []string
	for _, m := range h.mdevs {
		out = append(out, m.doc)
	}
	return out, nil
}

func (h *fakeHost) MdevParentNodeDevices(context.Context) ([]string, error) {
	if err := h.call("parents"); err != nil {
		return nil, err
	}
	var out []string
	for _, name := range slices.Sorted(maps.Keys(h.parents)) {
		out = append(out, h.parents[name])
	}
	return out, nil
}

func (h *fakeHost) DefineNodeDevice(_ context.Context, doc string) (string, error) {
	if err := h.call("define"); err != nil {
		return "", err
	}
	d, err := ParseDevice(doc)
	if err != nil {
		return "", err
	}
	name := "mdev_" + strings.ReplaceAll(d.UUID, "-", "_") + "_" + d.Parent
	if m, ok := h.mdevs[name]; ok { // defining a running transient device keeps it running
		m.persistent = true
		return name, nil
	}
	h.mdevs[name] = &fakeMdev{doc: strings.Replace(doc, "<name></name>", "<name>"+name+"</name>", 1), persistent: true}
	return name, nil
}

func (h *fakeHost) state(name string) (*fakeMdev, error) {
	m, ok := h.mdevs[name]
	if !ok {
		return nil, fmt.Errorf("node device %s %w", name, virt.ErrNotFound)
	}
	return m, nil
}

func (h *fakeHost) StartNodeDevice(_ context.Context, name string) error {
	if err := h.call("start"); err != nil {
		return err
	}
	m, err := h.state(name)
	if err == nil {
		m.active = true
	}
	return err
}

func (h *fakeHost) SetNodeDeviceAutostart(_ context.Context, name string, on bool) error {
	if err := h.call("autostart"); err != nil {
		return err
	}
	m, err := h.state(name)
	if err == nil {
		m.autostart = on
	}
	return err
}

func (h *fakeHost) StopNodeDevice(_ context.Context, name string) error {
	if err := h.call("stop"); err != nil {
		return err
	}
	m, err := h.state(name)
	if err == nil {
		m.active = false
		if !m.persistent {
			delete(h.mdevs, name)
		}
	}
	return err
}

func (h *fakeHost) UndefineNodeDevice(_ context.Context, name string) error {
	if err := h.call("undefine"); err != nil {
		return err
	}
	m, err := h.state(name)
	if err == nil {
		m.persistent = false
		if !m.active {
			delete(h.mdevs, name)
		}
	}
	return err
}

func (h *fakeHost) NodeDeviceState(_ context.Context, name string) (virt.NodeDeviceState, error) {
	if err := h.call("state"); err != nil {
		return virt.NodeDeviceState{}, err
	}
	m, err := h.state(name)
	if err != nil {
		return virt.NodeDeviceState{}, err
	}
	if m.active && h.lag > 0 {
		h.lag--
		return virt.NodeDeviceState{Active: false, Persistent: m.persistent, Autostart: m.autostart}, nil
	}
	return virt.NodeDeviceState{Active: m.active, Persistent: m.persistent, Autostart: m.autostart}, nil
}

const testUUID = "6b6f6861-6b75-4d64-8000-000000000001"

func TestCheckRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		spec      Spec
		attribute string
		want      []string // each appears in the message
	}{
		{"unknown parent", Spec{Parent: "pci_0000_99_00_0", Type: "mtty-1"}, "parent", []string{
			"no node device pci_0000_99_00_0",
			"mtty_mtty (mtty-1 (22 available), mtty-2 (0 available)); pci_0000_41_00_0 (nvidia-222 (16 available), nvidia-230 (1 available))",
		}},
		{"a parent with no types", Spec{Parent: "pci_0000_00_01_0", Type: "mtty-1"}, "parent", []string{
			"pci_0000_00_01_0 offers no mediated device types", "Parents that offer mediated devices: mtty_mtty",
		}},
		{"a type the parent does not offer", Spec{Parent: "pci_0000_41_00_0", Type: "mtty-1"}, "type", []string{
			`offers no mediated device type "mtty-1"; it offers nvidia-222 (16 available), nvidia-230 (1 available).`,
		}},
		{"no instances left", Spec{Parent: "mtty_mtty", Type: "mtty-2"}, "type", []string{
			"Parent mtty_mtty has no instances of mtty-2 left (0 available); it offers mtty-1 (22 available), mtty-2 (0 available).",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			err := Manager{Host: newFakeHost(t)}.Check(context.Background(), tc.spec)
			var r *Refusal
			if !errors.As(err, &r) {
				t.Fatalf("got %v, want a refusal", err)
			}
			if r.Attribute != tc.attribute {
				t.Errorf("refusal on %q, want %q: %s", r.Attribute, tc.attribute, r.Msg)
			}
			for _, w := range tc.want {
				if !strings.Contains(r.Msg, w) {
					t.Errorf("message %q lacks %q", r.Msg, w)
				}
			}
		})
	}
}

func TestCheckNoParentsAtAll(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	h.parents = map[string]string{}
	err := Manager{Host: h}.Check(context.Background(), Spec{Parent: "mtty_mtty", Type: "mtty-1"})
	if err == nil || !strings.Contains(err.Error(), "no node device that offers mediated devices") {
		t.Errorf("got %v", err)
	}
}

func TestCheckHostErrorIsNotARefusal(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	h.fail["xml"] = errors.New("connection lost")
	err := Manager{Host: h}.Check(context.Background(), Spec{Parent: "mtty_mtty", Type: "mtty-1"})
	var r *Refusal
	if err == nil || errors.As(err, &r) {
		t.Errorf("got %v, want the host's error", err)
	}
}

func TestCreateFindRemove(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	m := Manager{Host: h}
	ctx := context.Background()
	s := Spec{Parent: "mtty_mtty", Type: "mtty-1", UUID: testUUID}
	if err := m.Check(ctx, s); err != nil {
		t.Fatal(err)
	}
	d, err := m.Create(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	if !d.Active || !d.Persistent || !d.Autostart || d.Type != "mtty-1" || d.Parent != "mtty_mtty" || d.UUID != testUUID {
		t.Errorf("created %+v", d)
	}
	if i := slices.Index(h.calls, "define"); i < 0 || !slices.Equal(h.calls[i:i+3], []string{"define", "autostart", "start"}) {
		t.Errorf("calls %v: want define, autostart, start", h.calls)
	}
	// the same uuid again is refused, naming the device that has it
	err = m.Check(ctx, s)
	var r *Refusal
	if !errors.As(err, &r) || r.Attribute != "uuid" || !strings.Contains(r.Msg, d.Name) {
		t.Errorf("a second device with uuid %s: %v", testUUID, err)
	}
	found, err := m.Find(ctx, strings.ToUpper(testUUID))
	if err != nil || found == nil || *found != d {
		t.Fatalf("Find: %+v, %v; want %+v", found, err, d)
	}
	if err := m.Remove(ctx, d); err != nil {
		t.Fatal(err)
	}
	if len(h.mdevs) != 0 {
		t.Errorf("left on the host: %v", h.mdevs)
	}
	if found, err := m.Find(ctx, testUUID); err != nil || found != nil {
		t.Errorf("Find after Remove: %+v, %v", found, err)
	}
	// removing what is gone already is not an error
	if err := m.Remove(ctx, d); err != nil {
		t.Errorf("second Remove: %v", err)
	}
}

func TestCreateUndoesAFailedStep(t *testing.T) {
	t.Parallel()
	for _, step := range []string{"autostart", "start"} {
		t.Run(step, func(t *testing.T) {
			t.Parallel()
			h := newFakeHost(t)
			h.fail[step] = errors.New("Cannot find 'mdevctl' in path")
			_, err := Manager{Host: h}.Create(context.Background(), Spec{Parent: "mtty_mtty", Type: "mtty-1", UUID: testUUID})
			if err == nil || !strings.Contains(err.Error(), "mdevctl") || !strings.Contains(err.Error(), "undefined it again") {
				t.Errorf("got %v", err)
			}
			if len(h.mdevs) != 0 {
				t.Errorf("left defined: %v", h.mdevs)
			}
		})
	}
}

func TestCreateReportsAFailedUndo(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	h.fail["start"] = errors.New("no instances")
	h.fail["undefine"] = errors.New("connection lost")
	_, err := Manager{Host: h}.Create(context.Background(), Spec{Parent: "mtty_mtty", Type: "mtty-1", UUID: testUUID})
	if err == nil || !strings.Contains(err.Error(), "remove node device mdev_"+strings.ReplaceAll(testUUID, "-", "_")+"_mtty_mtty by hand") {
		t.Errorf("got %v", err)
	}
}

// A device found stopped, or no longer marked to autostart, or left only
// transient, is brought back to what Create makes, and nothing else is done.
func TestRestore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := Spec{Parent: "mtty_mtty", Type: "mtty-1", UUID: testUUID}
	for _, c := range []struct {
		name  string
		spoil func(*fakeMdev)
		calls []string
	}{
		{"stopped", func(f *fakeMdev) { f.active = false }, []string{"start"}},
		{"autostart off", func(f *fakeMdev) { f.autostart = false }, []string{"autostart"}},
		{"stopped, autostart off", func(f *fakeMdev) { f.active, f.autostart = false, false }, []string{"autostart", "start"}},
		{"transient", func(f *fakeMdev) { f.persistent, f.autostart = false, false }, []string{"define", "autostart"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newFakeHost(t)
			m := Manager{Host: h}
			d, err := m.Create(ctx, s)
			if err != nil {
				t.Fatal(err)
			}
			c.spoil(h.mdevs[d.Name])
			found, err := m.Find(ctx, testUUID)
			if err != nil || found == nil {
				t.Fatal(found, err)
			}
			h.calls = nil
			got, err := m.Restore(ctx, s, *found)
			if err != nil {
				t.Fatal(err)
			}
			if !got.Active || !got.Persistent || !got.Autostart {
				t.Errorf("restored %+v", got)
			}
			var changes []string
			for _, call := range h.calls {
				if call != "list" && call != "state" {
					changes = append(changes, call)
				}
			}
			if !slices.Equal(changes, c.calls) {
				t.Errorf("calls %v, want %v", changes, c.calls)
			}
		})
	}
	// a failed start says which device and why
	h := newFakeHost(t)
	m := Manager{Host: h}
	d, err := m.Create(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	d.Active = false
	h.fail["start"] = errors.New("parent gone")
	if _, err := m.Restore(ctx, s, d); err == nil || !strings.Contains(err.Error(), "starting mediated device "+testUUID) || !strings.Contains(err.Error(), "parent gone") {
		t.Errorf("failed start: %v", err)
	}
}

// Create returns once libvirt reports the device started: it learns of the
// start from udev a moment after the call, and a refresh in that moment
// must not see a stopped device.
func TestCreateWaitsForLibvirtToSeeTheStart(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	h.lag = 3
	d, err := Manager{Host: h}.Create(context.Background(), Spec{Parent: "mtty_mtty", Type: "mtty-1", UUID: testUUID})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Active || h.lag != 0 {
		t.Fatalf("created %+v with %d lagging reads left", d, h.lag)
	}
	if n := strings.Count(strings.Join(h.calls, ","), "state"); n != 4 {
		t.Errorf("%d state reads, want 4 (three lagging, then started)", n)
	}
}
