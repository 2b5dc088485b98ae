package gpubind

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// machine is the fake host over a connection that cannot read the host's
// processes (tcp, tls), with a host file for the NVIDIA version.
type machine struct {
	*fakeHost
	version string // NVIDIAVersionFile's content; "" is no module loaded
	readErr error
}

func (m machine) Endpoint() virt.Endpoint { return virt.Endpoint{Transport: virt.TransportTCP} }
func (m machine) ReadsHostFiles() bool    { return false }
func (m machine) RunHostScript(context.Context, string, int64) ([]byte, error) {
	return nil, errors.New("not over tcp")
}

func (m machine) ReadHostFile(_ context.Context, path string, _ int64) ([]byte, error) {
	m.ops = append(m.ops, "read "+path)
	switch {
	case m.readErr != nil:
		return nil, m.readErr
	case path != NVIDIAVersionFile || m.version == "":
		return nil, fmt.Errorf("%s: %w", path, os.ErrNotExist)
	}
	return []byte(m.version + "\n"), nil
}

func request() Request {
	return Request{Target: mustAddr("0000:03:00.0"), ReadNVIDIAVersion: true}
}

func TestApplyBindsThePlannedGroup(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	res, err := Apply(context.Background(), Binder{Host: h}, machine{fakeHost: h}, request())
	if err != nil {
		t.Fatal(err)
	}
	if h.drivers() != "vfio-pci,vfio-pci" || len(res.Bound) != 2 || res.Plan.Group != res.Inventory.Lookup(request().Target).Group {
		t.Errorf("drivers %s, %d bound, plan %+v", h.drivers(), len(res.Bound), res.Plan)
	}
	// The stand-in is not NVIDIA's: the version is looked for, and none is read.
	if !res.NVIDIAChecked || res.NVIDIAVersion != nil || res.NVIDIAVersionErr != nil {
		t.Errorf("NVIDIA version: checked %v, %v, %v", res.NVIDIAChecked, res.NVIDIAVersion, res.NVIDIAVersionErr)
	}
}

// Each refusal before the bind has its own type, and nothing moves.
func TestApplyRefusesBeforeMoving(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		setup func(h *fakeHost, r *Request)
		want  func(error) bool
	}{
		"inventory": {
			setup: func(h *fakeHost, _ *Request) { h.fail["list"] = errors.New("injected") },
			want:  func(err error) bool { var e *InventoryError; return errors.As(err, &e) },
		},
		"plan": {
			setup: func(_ *fakeHost, r *Request) { r.Target = mustAddr("0000:7f:1f.7") },
			want: func(err error) bool {
				var e *PlanError
				var unknown *vfio.UnknownDeviceError
				return errors.As(err, &e) && errors.As(err, &unknown)
			},
		},
		"domain": {
			setup: func(h *fakeHost, _ *Request) { h.users = map[string][]string{"0000:03:00.1": {"other-vm"}} },
			want: func(err error) bool {
				var e *InUseError
				return errors.As(err, &e) && strings.Contains(err.Error(), "other-vm")
			},
		},
		"users unread": {
			setup: func(h *fakeHost, _ *Request) { h.fail["users"] = errors.New("injected") },
			want: func(err error) bool {
				var e *InUseError
				var u *UsersError
				return errors.As(err, &e) && errors.As(err, &u)
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newFakeHost(t)
			before := h.drivers()
			req := request()
			tc.setup(h, &req)
			_, err := Apply(context.Background(), Binder{Host: h}, machine{fakeHost: h}, req)
			if !tc.want(err) {
				t.Errorf("error %T: %v", err, err)
			}
			if h.drivers() != before || len(h.ops) != 0 {
				t.Errorf("drivers %s (were %s), ops %v", h.drivers(), before, h.ops)
			}
		})
	}
}

// A rebind with every function already on vfio-pci moves nothing, so it
// checks nothing: a running domain using the group is no refusal.
func TestApplyRebindOfABoundGroupChecksNothing(t *testing.T) {
	t.Parallel()
	h := boundFakeHost(t)
	h.users = map[string][]string{"0000:03:00.0": {"gpu-vm"}}
	req := request()
	req.Rebind, req.Known = true, map[string]string{"0000:03:00.0": "bochs-drm"}
	res, err := Apply(context.Background(), Binder{Host: h}, machine{fakeHost: h}, req)
	if err != nil {
		t.Fatal(err)
	}
	if res.NVIDIAChecked || len(h.ops) != 0 || len(res.Bound) != 2 || res.Bound[0].Original != "bochs-drm" {
		t.Errorf("checked NVIDIA %v, ops %v, bound %+v", res.NVIDIAChecked, h.ops, res.Bound)
	}
}

func TestNVIDIAVersion(t *testing.T) {
	t.Parallel()
	nvidia := &vfio.Device{VendorID: vfio.VendorNVIDIA}
	boom := errors.New("injected")
	for name, tc := range map[string]struct {
		dev     *vfio.Device
		m       machine
		want    string // "" is nil
		wantErr error
	}{
		"not NVIDIA's":    {dev: &vfio.Device{VendorID: 0x1234}, m: machine{version: "550.54.15"}},
		"no module":       {dev: nvidia, m: machine{}},
		"loaded":          {dev: nvidia, m: machine{version: "550.54.15"}, want: "550.54.15"},
		"cannot be read":  {dev: nvidia, m: machine{readErr: boom}, wantErr: boom},
		"no device found": {dev: nil, m: machine{version: "550.54.15"}},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			tc.m.fakeHost = &fakeHost{}
			v, err := NVIDIAVersion(context.Background(), tc.m, tc.dev)
			got := ""
			if v != nil {
				got = *v
			}
			if got != tc.want || !errors.Is(err, tc.wantErr) || (tc.wantErr == nil && err != nil) {
				t.Errorf("got %q, %v; want %q, %v", got, err, tc.want, tc.wantErr)
			}
		})
	}
}
