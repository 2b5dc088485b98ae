package snapshot

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"

	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// fakeHost is one domain and its volumes in memory; a volume's content is
// a string that copies carry along. Every call that changes something is
// a step: fault makes step n fail once, and interrupt cancels the caller's
// context as step n begins (Ctrl-C), after which calls given that context
// fail as libvirt's do.
type fakeHost struct {
	mu    sync.Mutex
	xml   string
	state string
	vols  map[string]string // pool/name -> content
	calls []string
	steps int
	// fault fails the step of that number once.
	fault int
	// interrupt cancels, as the step of that number begins.
	interrupt int
	cancel    context.CancelFunc
	// starts records, for each start, the disks' contents.
	starts []string
	// freezeErr is what the guest agent's freeze answers.
	freezeErr error
	// frozen is whether the guest's file systems are frozen now.
	frozen bool
	// backup is the targets of the running backup job.
	backup []virt.BackupTarget
	// duringBackup runs while the job copies (the guest writing on).
	duringBackup func()
	// snapAt is what each backup target got: the disks as the job began.
	snapAt map[string]string
}

const (
	uuid      = "5a1d9c4e-0000-4000-8000-000000000001"
	otherUUID = "5a1d9c4e-0000-4000-8000-000000000002"
)

func vmXML(disks string) string {
	return `<domain type="qemu"><name>src</name><uuid>` + uuid + `</uuid><memory unit="MiB">512</memory><vcpu>1</vcpu>
<os><type arch="x86_64" machine="q35">hvm</type></os>
<metadata><vm xmlns="https://kohaku.dev/xmlns/vm/1"><owned-volume pool="vms" volume="src-root.qcow2"/><owned-volume pool="vms" volume="src-data.qcow2"/><data-disk serial="data"/></vm></metadata>
<devices>` + disks + `</devices></domain>`
}

const (
	bootDisk = `<disk type="volume" device="disk"><driver name="qemu" type="qcow2"/><source pool="vms" volume="src-root.qcow2"/><target dev="vda" bus="virtio"/></disk>`
	dataDisk = `<disk type="volume" device="disk"><driver name="qemu" type="qcow2"/><source pool="vms" volume="src-data.qcow2"/><target dev="vdb" bus="virtio"/><serial>data</serial></disk>`
)

func newHost(state string) *fakeHost {
	return &fakeHost{
		xml: vmXML(bootDisk + dataDisk), state: state,
		vols: map[string]string{"vms/src-root.qcow2": "root-v1", "vms/src-data.qcow2": "data-v1", "vms/other": "x"},
	}
}

// step counts a changing call and applies the faults; it returns the
// error the call fails with.
func (h *fakeHost) step(ctx context.Context, call string) error {
	h.mu.Lock()
	h.steps++
	n := h.steps
	h.calls = append(h.calls, call)
	cancel := h.cancel
	h.mu.Unlock()
	if n == h.interrupt && cancel != nil {
		cancel()
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s: %w", call, err)
	}
	if n == h.fault {
		return fmt.Errorf("%s: injected fault at step %d", call, n)
	}
	return nil
}

func (h *fakeHost) contents() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for k, v := range h.vols {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

func (h *fakeHost) LookupDomain(_ context.Context, n string) (virt.DomainRef, error) {
	if n != "src" && n != uuid {
		return virt.DomainRef{}, fmt.Errorf("domain %s: %w", n, virt.ErrDomainNotFound)
	}
	return virt.DomainRef{UUID: uuid, Name: "src"}, nil
}

func (h *fakeHost) DomainState(context.Context, string) (string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.state, nil
}

func (h *fakeHost) StartDomain(ctx context.Context, _ virt.DomainRef) error {
	if err := h.step(ctx, "start"); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	root, ok1 := h.vols["vms/src-root.qcow2"]
	data, ok2 := h.vols["vms/src-data.qcow2"]
	if !ok1 || !ok2 {
		return errors.New("Storage volume not found") // libvirt refuses a domain with a disk missing
	}
	h.starts = append(h.starts, root+","+data)
	h.state = "running"
	return nil
}

func (h *fakeHost) AskShutdown(ctx context.Context, _ virt.DomainRef, via virt.PowerVia) error {
	if err := h.step(ctx, "shutdown via "+string(via)); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.state = "shut off"
	return nil
}

func (h *fakeHost) AskReboot(context.Context, virt.DomainRef, virt.PowerVia) error { return nil }
func (h *fakeHost) ResetDomain(context.Context, virt.DomainRef) error              { return nil }
func (h *fakeHost) ForceOffDomain(context.Context, virt.DomainRef) error {
	return errors.New("never forced")
}
func (h *fakeHost) ReadChannel(context.Context, string, string, func([]byte) bool) error {
	return nil
}

func (h *fakeHost) ReadDomain(_ context.Context, ref virt.DomainRef) (*virt.DomainStatus, error) {
	return &virt.DomainStatus{DomainRef: ref, XML: h.xml}, nil
}

const agentChan = `<channel type="unix"><target type="virtio" name="org.qemu.guest_agent.0"/></channel>`

func (h *fakeHost) VolumeInfo(_ context.Context, pool, name string) (*virt.VolumeDetail, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, ok := h.vols[pool+"/"+name]; !ok {
		return nil, fmt.Errorf("%s/%s: %w", pool, name, virt.ErrVolumeNotFound)
	}
	return &virt.VolumeDetail{Pool: pool, Name: name, Path: "/" + pool + "/" + name, Format: "qcow2", CapacityBytes: 1 << 30}, nil
}

func (h *fakeHost) VolumeExists(_ context.Context, pool, name string) (bool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	_, ok := h.vols[pool+"/"+name]
	return ok, nil
}

// FlattenVolume copies; like the real one it never overwrites, and a copy
// that fails leaves nothing.
func (h *fakeHost) FlattenVolume(ctx context.Context, srcPool, srcName, pool, name string) (*virt.VolumeDetail, error) {
	if err := h.step(ctx, fmt.Sprintf("copy %s -> %s", srcName, name)); err != nil {
		return nil, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if inUse := srcName == "src-root.qcow2" || srcName == "src-data.qcow2"; inUse && h.state != "shut off" {
		return nil, errors.New("copied a disk in use by a running guest")
	}
	src, ok := h.vols[srcPool+"/"+srcName]
	if !ok {
		return nil, fmt.Errorf("%s/%s: %w", srcPool, srcName, virt.ErrVolumeNotFound)
	}
	if _, ok := h.vols[pool+"/"+name]; ok {
		return nil, &virt.VolumeExistsError{Pool: pool, Name: name}
	}
	h.vols[pool+"/"+name] = src
	return &virt.VolumeDetail{Pool: pool, Name: name, Path: "/" + pool + "/" + name, Format: "qcow2", CapacityBytes: 1 << 30}, nil
}

func (h *fakeHost) HashVolume(ctx context.Context, pool, name string) (virt.ImageDigest, error) {
	if err := h.step(ctx, "hash "+name); err != nil {
		return virt.ImageDigest{}, err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return virt.ImageDigest{SHA256: "sha-of-" + h.vols[pool+"/"+name], Bytes: 1}, nil
}

func (h *fakeHost) RemoveVolume(ctx context.Context, pool, name string) error {
	if err := h.step(ctx, "delete "+name); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.vols, pool+"/"+name)
	return nil
}

func virtRef() virt.DomainRef { return virt.DomainRef{UUID: uuid, Name: "src"} }

func (h *fakeHost) FreezeFilesystems(ctx context.Context, _ virt.DomainRef) (int, error) {
	if err := h.step(ctx, "freeze"); err != nil {
		return 0, err
	}
	if h.freezeErr != nil {
		return 0, h.freezeErr
	}
	h.frozen = true
	return 2, nil
}

func (h *fakeHost) ThawFilesystems(ctx context.Context, _ virt.DomainRef) error {
	if err := h.step(ctx, "thaw"); err != nil {
		return err
	}
	h.frozen = false
	return nil
}

// BeginBackup records what each target will hold: its disk as it is now.
func (h *fakeHost) BeginBackup(ctx context.Context, _ virt.DomainRef, targets []virt.BackupTarget) error {
	if err := h.step(ctx, "backup begin"); err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.snapAt = map[string]string{}
	for _, t := range targets {
		if _, ok := h.vols[t.Pool+"/"+t.Name]; ok {
			return &virt.VolumeExistsError{Pool: t.Pool, Name: t.Name}
		}
		h.snapAt[t.Pool+"/"+t.Name] = h.vols[t.SourcePool+"/"+t.SourceVolume]
		if h.frozen {
			h.snapAt[t.Pool+"/"+t.Name] += "+frozen"
		}
	}
	h.backup = targets
	return nil
}

// WaitBackup lands the targets, or, when ctx has ended or a step fails,
// aborts the job and deletes them.
func (h *fakeHost) WaitBackup(ctx context.Context, _ virt.DomainRef, targets []virt.BackupTarget, progress func(done, total uint64)) ([]*virt.VolumeDetail, error) {
	if h.duringBackup != nil {
		h.duringBackup()
	}
	err := h.step(ctx, "backup wait")
	h.mu.Lock()
	defer h.mu.Unlock()
	h.backup = nil
	if err != nil {
		for _, t := range targets {
			delete(h.vols, t.Pool+"/"+t.Name)
		}
		return nil, err
	}
	var out []*virt.VolumeDetail
	for _, t := range targets {
		h.vols[t.Pool+"/"+t.Name] = h.snapAt[t.Pool+"/"+t.Name]
		out = append(out, &virt.VolumeDetail{Pool: t.Pool, Name: t.Name, Path: "/" + t.Pool + "/" + t.Name, Format: "qcow2", CapacityBytes: 1 << 30})
	}
	return out, nil
}

func (h *fakeHost) ListVolumeNames(_ context.Context, pool string) ([]string, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for k := range h.vols {
		if p, n, _ := strings.Cut(k, "/"); p == pool {
			out = append(out, n)
		}
	}
	return out, nil
}
