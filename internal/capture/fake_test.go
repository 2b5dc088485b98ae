package capture

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// fakeHost is one domain and a few volumes in memory. It records the calls
// that change something, in order.
type fakeHost struct {
	mu      sync.Mutex
	xml     string
	state   string
	stops   bool // the guest powers off when asked
	vols    map[string]*virt.VolumeDetail
	paths   map[string]string // host path -> pool/name
	agent   error             // AgentExec's error
	exit    int               // the seal's exit code
	fail    map[string]error  // "flatten", "hash", "start"
	calls   []string
	scripts []string
	// onFlatten runs as the flatten starts (an interrupt mid-flatten).
	onFlatten func()
	// startCtxErr is the error of the context StartDomain was given.
	startCtxErr error
}

const uuid = "5a1d9c4e-0000-4000-8000-000000000001"

func domainXML(disk, channels string) string {
	return `<domain type="kvm"><name>src</name><uuid>` + uuid + `</uuid><memory unit="MiB">512</memory><vcpu>1</vcpu>
<os><type arch="x86_64" machine="q35">hvm</type></os><devices>` + disk + channels + `</devices></domain>`
}

const (
	volDisk   = `<disk type="volume" device="disk"><driver name="qemu" type="qcow2"/><source pool="vms" volume="src-root.qcow2"/><target dev="vda" bus="virtio"/></disk>`
	agentChan = `<channel type="unix"><target type="virtio" name="org.qemu.guest_agent.0"/></channel>`
)

func newHost(xml, state string) *fakeHost {
	return &fakeHost{
		xml: xml, state: state, stops: true,
		vols: map[string]*virt.VolumeDetail{
			"vms/src-root.qcow2": {Pool: "vms", Name: "src-root.qcow2", Path: "/vms/src-root.qcow2", Format: "qcow2", CapacityBytes: 10 << 30, BackingPath: "/images/debian.qcow2"},
		},
		paths: map[string]string{"/vms/src-root.qcow2": "vms/src-root.qcow2"},
		fail:  map[string]error{},
	}
}

func (h *fakeHost) record(s string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, s)
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
	h.record("start")
	h.startCtxErr = ctx.Err()
	if err := h.fail["start"]; err != nil {
		return err
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.state = "running"
	return nil
}

func (h *fakeHost) AskShutdown(_ context.Context, _ virt.DomainRef, via virt.PowerVia) error {
	h.record("shutdown via " + string(via))
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stops {
		h.state = "shut off"
	}
	return nil
}

func (h *fakeHost) AskReboot(context.Context, virt.DomainRef, virt.PowerVia) error { return nil }
func (h *fakeHost) ResetDomain(context.Context, virt.DomainRef) error              { return nil }

func (h *fakeHost) ForceOffDomain(context.Context, virt.DomainRef) error {
	h.record("force off")
	return nil
}

func (h *fakeHost) ReadChannel(context.Context, string, string, func([]byte) bool) error { return nil }

func (h *fakeHost) ReadDomain(_ context.Context, ref virt.DomainRef) (*virt.DomainStatus, error) {
	return &virt.DomainStatus{DomainRef: ref, XML: h.xml}, nil
}

func (h *fakeHost) VolumeByPath(_ context.Context, path string) (string, string, error) {
	pn, ok := h.paths[path]
	if !ok {
		return "", "", fmt.Errorf("no storage pool holds %s: %w", path, virt.ErrVolumeNotFound)
	}
	p, n, _ := strings.Cut(pn, "/")
	return p, n, nil
}

func (h *fakeHost) VolumeInfo(_ context.Context, pool, name string) (*virt.VolumeDetail, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	v, ok := h.vols[pool+"/"+name]
	if !ok {
		return nil, fmt.Errorf("%s/%s: %w", pool, name, virt.ErrVolumeNotFound)
	}
	return v, nil
}

func (h *fakeHost) FlattenVolume(_ context.Context, srcPool, srcName, pool, name string) (*virt.VolumeDetail, error) {
	h.mu.Lock()
	running := h.state != "shut off"
	h.mu.Unlock()
	h.record(fmt.Sprintf("flatten %s/%s -> %s/%s", srcPool, srcName, pool, name))
	if h.onFlatten != nil {
		h.onFlatten()
	}
	if running {
		return nil, fmt.Errorf("flattened a disk in use by a running guest")
	}
	if err := h.fail["flatten"]; err != nil {
		return nil, err
	}
	v := &virt.VolumeDetail{Pool: pool, Name: name, Path: "/" + pool + "/" + name, Format: "qcow2", CapacityBytes: h.vols[srcPool+"/"+srcName].CapacityBytes}
	h.mu.Lock()
	h.vols[pool+"/"+name] = v
	h.mu.Unlock()
	return v, nil
}

func (h *fakeHost) HashVolume(_ context.Context, pool, name string) (virt.ImageDigest, error) {
	h.record("hash " + pool + "/" + name)
	if err := h.fail["hash"]; err != nil {
		return virt.ImageDigest{}, err
	}
	return virt.ImageDigest{SHA256: strings.Repeat("ab", 32), Bytes: 1234}, nil
}

func (h *fakeHost) RemoveVolume(_ context.Context, pool, name string) error {
	h.record("delete " + pool + "/" + name)
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.vols, pool+"/"+name)
	return nil
}

func (h *fakeHost) AgentExec(_ context.Context, _, path string, args []string, _ time.Duration) (*virt.AgentExecResult, error) {
	h.record("seal")
	if h.agent != nil {
		return nil, h.agent
	}
	h.scripts = append(h.scripts, path+" "+strings.Join(args, " "))
	return &virt.AgentExecResult{ExitCode: h.exit, Output: "kohaku-seal: done\n"}, nil
}
