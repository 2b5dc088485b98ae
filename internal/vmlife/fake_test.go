package vmlife

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// fakeHost is a libvirt host in memory: domains by name, volumes by
// pool/name, and a failure to inject per operation. It records every
// operation in order.
type fakeHost struct {
	mu        sync.Mutex
	transport string
	domains   map[string]*fakeDomain
	volumes   map[string]*virt.VolumeDetail
	seeds     map[string][]byte
	nodeDevs  map[string]string
	numa      []virt.NUMANode
	fail      map[string]error // operation -> error it returns
	// startsDead makes StartDomain succeed while the domain stays off.
	startsDead bool
	// deaf guests ignore the shutdown request: StopDomain forces them off
	// however long the grace.
	deaf bool
	ops  []string
	// graces are the grace periods StopDomain was called with.
	graces []time.Duration
}

type fakeDomain struct {
	ref       virt.DomainRef
	xml       string
	active    bool
	autostart bool
}

func newFakeHost() *fakeHost {
	return &fakeHost{
		transport: virt.TransportTCP,
		domains:   map[string]*fakeDomain{},
		volumes:   map[string]*virt.VolumeDetail{},
		seeds:     map[string][]byte{},
		nodeDevs:  map[string]string{},
		fail:      map[string]error{},
	}
}

func (h *fakeHost) op(name string) error {
	h.ops = append(h.ops, name)
	return h.fail[name]
}

func (h *fakeHost) addVolume(pool, name, format string, capacity int64) {
	h.volumes[pool+"/"+name] = &virt.VolumeDetail{Pool: pool, Name: name, Path: "/pools/" + pool + "/" + name, Format: format, CapacityBytes: capacity}
}

func (h *fakeHost) byRef(ref virt.DomainRef) *fakeDomain {
	for _, d := range h.domains {
		if d.ref.UUID == ref.UUID {
			return d
		}
	}
	return nil
}

func (h *fakeHost) Endpoint() virt.Endpoint {
	return virt.Endpoint{Raw: "fake", Transport: h.transport}
}

func (h *fakeHost) LookupDomain(_ context.Context, name string) (virt.DomainRef, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.op("LookupDomain"); err != nil {
		return virt.DomainRef{}, err
	}
	if d, ok := h.domains[name]; ok {
		return d.ref, nil
	}
	return virt.DomainRef{}, fmt.Errorf("domain %s: %w", name, virt.ErrDomainNotFound)
}

func (h *fakeHost) ReadDomain(_ context.Context, ref virt.DomainRef) (*virt.DomainStatus, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.op("ReadDomain"); err != nil {
		return nil, err
	}
	d := h.byRef(ref)
	if d == nil {
		return nil, fmt.Errorf("domain %s: %w", ref, virt.ErrDomainNotFound)
	}
	st := &virt.DomainStatus{DomainRef: d.ref, XML: d.xml, Active: d.active, Autostart: d.autostart, State: virt.DomainState(libvirt.DomainShutoff)}
	if d.active {
		st.State = virt.DomainState(libvirt.DomainRunning)
	}
	return st, nil
}

func (h *fakeHost) DefineDomain(_ context.Context, name, xml string) (virt.DomainRef, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.op("DefineDomain"); err != nil {
		return virt.DomainRef{}, err
	}
	if d, ok := h.domains[name]; ok {
		d.xml = xml
		return d.ref, nil
	}
	ref := virt.DomainRef{Name: name, UUID: fmt.Sprintf("00000000-0000-4000-8000-%012d", len(h.domains)+1)}
	h.domains[name] = &fakeDomain{ref: ref, xml: xml}
	return ref, nil
}

func (h *fakeHost) StartDomain(_ context.Context, ref virt.DomainRef) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.op("StartDomain"); err != nil {
		return err
	}
	if d := h.byRef(ref); d != nil {
		d.active = !h.startsDead
		return nil
	}
	return virt.ErrDomainNotFound
}

func (h *fakeHost) SetAutostart(_ context.Context, ref virt.DomainRef, on bool) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.op("SetAutostart"); err != nil {
		return err
	}
	if d := h.byRef(ref); d != nil {
		d.autostart = on
		return nil
	}
	return virt.ErrDomainNotFound
}

func (h *fakeHost) StopDomain(_ context.Context, ref virt.DomainRef, grace time.Duration) (virt.StopResult, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.op("StopDomain"); err != nil {
		return 0, err
	}
	h.graces = append(h.graces, grace)
	d := h.byRef(ref)
	if d == nil || !d.active {
		return virt.StopNotRunning, nil
	}
	d.active = false
	if grace == 0 || h.deaf {
		return virt.StopForced, nil
	}
	return virt.StopGraceful, nil
}

func (h *fakeHost) UndefineDomain(_ context.Context, ref virt.DomainRef) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.op("UndefineDomain"); err != nil {
		return err
	}
	if d := h.byRef(ref); d != nil {
		delete(h.domains, d.ref.Name)
	}
	return nil
}

func (h *fakeHost) VolumeInfo(_ context.Context, pool, name string) (*virt.VolumeDetail, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.op("VolumeInfo"); err != nil {
		return nil, err
	}
	if v, ok := h.volumes[pool+"/"+name]; ok {
		c := *v
		return &c, nil
	}
	return nil, fmt.Errorf("pool %s has no volume %q: %w", pool, name, virt.ErrNotFound)
}

func (h *fakeHost) VolumeByPath(_ context.Context, path string) (string, string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.op("VolumeByPath"); err != nil {
		return "", "", err
	}
	for _, v := range h.volumes {
		if v.Path == path {
			return v.Pool, v.Name, nil
		}
	}
	return "", "", virt.ErrNotFound
}

func (h *fakeHost) CreateOverlay(_ context.Context, pool, name, basePool, baseName string, capacity int64) (*virt.VolumeDetail, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.op("CreateOverlay"); err != nil {
		return nil, err
	}
	base, ok := h.volumes[basePool+"/"+baseName]
	if !ok {
		return nil, fmt.Errorf("pool %s has no volume %q", basePool, baseName)
	}
	if capacity == 0 {
		capacity = base.CapacityBytes
	}
	v := &virt.VolumeDetail{Pool: pool, Name: name, Path: "/pools/" + pool + "/" + name, Format: "qcow2", CapacityBytes: capacity, BackingPath: base.Path}
	h.volumes[pool+"/"+name] = v
	c := *v
	return &c, nil
}

func (h *fakeHost) RemoveVolume(_ context.Context, pool, name string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.op("RemoveVolume"); err != nil {
		return err
	}
	delete(h.volumes, pool+"/"+name)
	return nil
}

func (h *fakeHost) DownloadVolume(_ context.Context, pool, name string, limit int64) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.op("DownloadVolume"); err != nil {
		return nil, err
	}
	b, ok := h.seeds[pool+"/"+name]
	if !ok {
		return nil, virt.ErrNotFound
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("volume %s/%s is %d bytes, more than the %d read", pool, name, len(b), limit)
	}
	return b, nil
}

func (h *fakeHost) NodeDeviceXML(_ context.Context, name string) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.op("NodeDeviceXML"); err != nil {
		return "", err
	}
	if x, ok := h.nodeDevs[name]; ok {
		return x, nil
	}
	return "", fmt.Errorf("node device %s: %w", name, virt.ErrNotFound)
}

func (h *fakeHost) NUMANodes(context.Context) ([]virt.NUMANode, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.op("NUMANodes"); err != nil {
		return nil, err
	}
	return slices.Clone(h.numa), nil
}

// state is what the host holds, for comparing before and after.
func (h *fakeHost) state() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var parts []string
	for n, d := range h.domains {
		parts = append(parts, fmt.Sprintf("domain %s active=%t autostart=%t", n, d.active, d.autostart))
	}
	for k := range h.volumes {
		parts = append(parts, "volume "+k)
	}
	sortStrings(parts)
	return strings.Join(parts, "\n")
}

func sortStrings(s []string) {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
}

var _ Host = (*fakeHost)(nil)

// lost is a connection lost mid-call: the call's outcome is unknown.
func lost(op string) error {
	return &virt.ConnectionError{Endpoint: virt.Endpoint{Raw: "fake", Transport: virt.TransportTCP}, Op: op, Err: errors.New("connection reset")}
}

// testSpec is a small VM with an overlay disk.
func testSpec(name string) domain.Spec {
	return domain.Spec{
		Name: name, Type: domain.TypeQEMU, VCPU: 1, MemoryMiB: 128,
		Disk: &domain.Disk{Source: domain.Source{Pool: "default", Volume: name + "-root.qcow2"}, Format: domain.DiskQCOW2},
	}
}

func (h *fakeHost) GrowVolume(_ context.Context, pool, name string, capacity int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.op("GrowVolume"); err != nil {
		return err
	}
	v, ok := h.volumes[pool+"/"+name]
	switch {
	case !ok:
		return fmt.Errorf("pool %s has no volume %q: %w", pool, name, virt.ErrNotFound)
	case capacity < v.CapacityBytes:
		return errors.New("can't shrink capacity below current capacity unless shrink flag explicitly specified")
	}
	v.CapacityBytes = capacity
	return nil
}

// GrowDiskLive grows the volume behind the running domain's disk target,
// found in its definition as libvirt would.
func (h *fakeHost) GrowDiskLive(_ context.Context, ref virt.DomainRef, target string, size int64) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.op("GrowDiskLive"); err != nil {
		return err
	}
	d := h.byRef(ref)
	if d == nil || !d.active {
		return errors.New("Requested operation is not valid: domain is not running")
	}
	var x libvirtxml.Domain
	if err := x.Unmarshal(d.xml); err != nil {
		return err
	}
	for _, disk := range x.Devices.Disks {
		if disk.Target == nil || disk.Target.Dev != target || disk.Source == nil || disk.Source.Volume == nil {
			continue
		}
		v, ok := h.volumes[disk.Source.Volume.Pool+"/"+disk.Source.Volume.Volume]
		if !ok {
			return fmt.Errorf("no volume behind disk %s", target)
		}
		if size < v.CapacityBytes {
			return errors.New("shrinking disk is not supported")
		}
		v.CapacityBytes = size
		return nil
	}
	return fmt.Errorf("disk '%s' was not found in the domain config", target)
}

func (h *fakeHost) CreateVolume(_ context.Context, pool, name, format string, capacity int64) (*virt.VolumeDetail, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.op("CreateVolume"); err != nil {
		return nil, err
	}
	if _, ok := h.volumes[pool+"/"+name]; ok {
		return nil, &virt.OverlayExistsError{Pool: pool, Name: name}
	}
	v := &virt.VolumeDetail{Pool: pool, Name: name, Path: "/pools/" + pool + "/" + name, Format: format, CapacityBytes: capacity}
	h.volumes[pool+"/"+name] = v
	c := *v
	return &c, nil
}

// FlattenVolume copies srcPool/srcName into a new qcow2 volume of its
// capacity, as CreateVolume makes one (never over another).
func (h *fakeHost) FlattenVolume(ctx context.Context, srcPool, srcName, pool, name string) (*virt.VolumeDetail, error) {
	h.mu.Lock()
	err := h.op("FlattenVolume")
	h.mu.Unlock()
	if err != nil {
		return nil, err
	}
	src, err := h.VolumeInfo(ctx, srcPool, srcName)
	if err != nil {
		return nil, err
	}
	return h.CreateVolume(ctx, pool, name, "qcow2", src.CapacityBytes)
}

// editDisks applies edit to the disks of a running domain's definition, as
// a hot-plug with libvirt's live and config flags does.
func (h *fakeHost) editDisks(ref virt.DomainRef, edit func(*libvirtxml.Domain) error) error {
	d := h.byRef(ref)
	if d == nil || !d.active {
		return errors.New("Requested operation is not valid: domain is not running")
	}
	var x libvirtxml.Domain
	if err := x.Unmarshal(d.xml); err != nil {
		return err
	}
	if err := edit(&x); err != nil {
		return err
	}
	s, err := x.Marshal()
	if err != nil {
		return err
	}
	d.xml = s
	return nil
}

func (h *fakeHost) AttachDisk(_ context.Context, ref virt.DomainRef, diskXML string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.op("AttachDisk"); err != nil {
		return err
	}
	var disk libvirtxml.DomainDisk
	if err := disk.Unmarshal(diskXML); err != nil {
		return err
	}
	return h.editDisks(ref, func(x *libvirtxml.Domain) error {
		for _, o := range x.Devices.Disks {
			if o.Target != nil && o.Target.Dev == disk.Target.Dev {
				return fmt.Errorf("target %s already exists", disk.Target.Dev)
			}
		}
		x.Devices.Disks = append(x.Devices.Disks, disk)
		return nil
	})
}

func (h *fakeHost) DetachDisk(_ context.Context, ref virt.DomainRef, diskXML string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.op("DetachDisk"); err != nil {
		return err
	}
	var disk libvirtxml.DomainDisk
	if err := disk.Unmarshal(diskXML); err != nil {
		return err
	}
	return h.editDisks(ref, func(x *libvirtxml.Domain) error {
		n := len(x.Devices.Disks)
		x.Devices.Disks = slices.DeleteFunc(x.Devices.Disks, func(o libvirtxml.DomainDisk) bool {
			return o.Target != nil && o.Target.Dev == disk.Target.Dev
		})
		if len(x.Devices.Disks) == n {
			return fmt.Errorf("disk %s not found", disk.Target.Dev)
		}
		return nil
	})
}
