package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/snapshot"
)

const vmUUID = "5a1d9c4e-0000-4000-8000-000000000001"

// fakeHost is a host's volumes in memory, streamed in small chunks as
// libvirt streams packets, and one VM with a boot overlay and a data disk
// that Kohaku made. The snapshot.Host methods a backup does not use are
// left to the nil interface (a call panics).
type fakeHost struct {
	snapshot.Host
	mu   sync.Mutex
	vols map[string][]byte // pool/name
	// corrupt makes an upload of a name land with its first byte changed.
	corrupt string
	// failUpload makes an upload of a name fail.
	failUpload map[string]error
	// cancelAt cancels cancel once that many bytes were streamed out.
	cancelAt int
	cancel   context.CancelFunc
	streamed int
}

func newHost() *fakeHost {
	return &fakeHost{vols: map[string][]byte{}, failUpload: map[string]error{}}
}

// withVM gives the host the VM src and its snapshot "before".
func (h *fakeHost) withVM() *fakeHost {
	h.vols["vms/src-root.qcow2"] = []byte("QFI\xfb root")
	h.vols["vms/src-data.qcow2"] = []byte("QFI\xfb data")
	h.vols["vms/src-root.qcow2.snap-before"] = []byte("QFI\xfb the boot disk as it was, longer than a chunk")
	h.vols["vms/src-data.qcow2.snap-before"] = []byte("QFI\xfb the data disk as it was, longer than a chunk")
	return h
}

func (h *fakeHost) LookupDomain(_ context.Context, vm string) (hostapi.DomainRef, error) {
	if vm != vmUUID && vm != "src" {
		return hostapi.DomainRef{}, fmt.Errorf("domain %s %w", vm, hostapi.ErrNotFound)
	}
	return hostapi.DomainRef{Name: "src", UUID: vmUUID}, nil
}

func (h *fakeHost) ReadDomain(_ context.Context, ref hostapi.DomainRef) (*hostapi.DomainStatus, error) {
	return &hostapi.DomainStatus{DomainRef: ref, XML: `<domain type="qemu"><name>src</name><uuid>` + vmUUID + `</uuid><memory unit="MiB">512</memory><vcpu>1</vcpu>
<os><type arch="x86_64" machine="q35">hvm</type></os>
<metadata><vm xmlns="https://kohaku.dev/xmlns/vm/1"><owned-volume pool="vms" volume="src-root.qcow2"/><owned-volume pool="vms" volume="src-data.qcow2"/><data-disk serial="data"/></vm></metadata>
<devices><disk type="volume" device="disk"><driver name="qemu" type="qcow2"/><source pool="vms" volume="src-root.qcow2"/><target dev="vda" bus="virtio"/></disk><disk type="volume" device="disk"><driver name="qemu" type="qcow2"/><source pool="vms" volume="src-data.qcow2"/><target dev="vdb" bus="virtio"/><serial>data</serial></disk></devices></domain>`}, nil
}

func (h *fakeHost) DomainState(context.Context, string) (string, error) { return "shut off", nil }

// vol is a copy of a volume's bytes, or the error of a lookup of a volume
// that is not there.
func (h *fakeHost) vol(pool, name string) ([]byte, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if b, ok := h.vols[pool+"/"+name]; ok {
		return bytes.Clone(b), nil
	}
	return nil, fmt.Errorf("%s/%s: %w", pool, name, hostapi.ErrVolumeNotFound)
}

func (h *fakeHost) VolumeExists(_ context.Context, pool, name string) (bool, error) {
	_, err := h.vol(pool, name)
	return err == nil, nil
}

// VolumeInfo says every volume is a qcow2 of 1 GiB.
func (h *fakeHost) VolumeInfo(_ context.Context, pool, name string) (*hostapi.VolumeDetail, error) {
	if _, err := h.vol(pool, name); err != nil {
		return nil, err
	}
	return &hostapi.VolumeDetail{Pool: pool, Name: name, Path: "/" + pool + "/" + name, Format: "qcow2", CapacityBytes: 1 << 30}, nil
}

func (h *fakeHost) StreamVolumeOut(ctx context.Context, pool, name string, w io.Writer) error {
	b, err := h.vol(pool, name)
	if err != nil {
		return err
	}
	for i := 0; i < len(b); i += 7 {
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := w.Write(b[i:min(i+7, len(b))]); err != nil {
			return err
		}
		h.mu.Lock()
		h.streamed += min(7, len(b)-i)
		if h.cancel != nil && h.streamed >= h.cancelAt {
			h.cancel()
		}
		h.mu.Unlock()
	}
	return nil
}

func (h *fakeHost) StreamVolumeIn(ctx context.Context, pool, name, format string, capacity int64, r io.Reader) (*hostapi.VolumeDetail, error) {
	h.mu.Lock()
	if _, ok := h.vols[pool+"/"+name]; ok {
		h.mu.Unlock()
		return nil, fmt.Errorf("%s/%s exists", pool, name)
	}
	h.vols[pool+"/"+name] = nil // made, then filled
	h.mu.Unlock()
	var buf bytes.Buffer
	_, err := io.Copy(&buf, r)
	if err == nil {
		err = ctx.Err()
	}
	if err != nil { // as the real one: what it made is deleted
		h.mu.Lock()
		delete(h.vols, pool+"/"+name)
		h.mu.Unlock()
		return nil, err
	}
	b := buf.Bytes()
	if h.corrupt == name && len(b) > 0 {
		b[0] ^= 1
	}
	h.mu.Lock()
	h.vols[pool+"/"+name] = b
	h.mu.Unlock()
	return &hostapi.VolumeDetail{Pool: pool, Name: name, Path: "/" + pool + "/" + name, Format: format, CapacityBytes: capacity}, nil
}

func (h *fakeHost) HashVolume(ctx context.Context, pool, name string) (hostapi.ImageDigest, error) {
	s := sha256.New()
	var buf bytes.Buffer
	if err := h.StreamVolumeOut(ctx, pool, name, &buf); err != nil {
		return hostapi.ImageDigest{}, err
	}
	s.Write(buf.Bytes())
	return hostapi.DigestOf(s, int64(buf.Len())), nil
}

func (h *fakeHost) RemoveVolume(_ context.Context, pool, name string) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.vols, pool+"/"+name)
	return nil
}

func (h *fakeHost) UploadVolume(_ context.Context, pool, name string, data []byte) (*hostapi.VolumeDetail, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if err := h.failUpload[name]; err != nil {
		return nil, err
	}
	if _, ok := h.vols[pool+"/"+name]; ok {
		return nil, fmt.Errorf("%s/%s exists", pool, name)
	}
	h.vols[pool+"/"+name] = bytes.Clone(data)
	return &hostapi.VolumeDetail{Pool: pool, Name: name}, nil
}

func (h *fakeHost) DownloadVolume(_ context.Context, pool, name string, limit int64) ([]byte, error) {
	b, err := h.vol(pool, name)
	if err == nil && int64(len(b)) > limit {
		err = fmt.Errorf("%s/%s is too big", pool, name)
	}
	return b, err
}

func (h *fakeHost) ListVolumeNames(_ context.Context, pool string) ([]string, error) {
	var out []string
	for _, k := range strings.Fields(h.names()) {
		if n, ok := strings.CutPrefix(k, pool+"/"); ok {
			out = append(out, n)
		}
	}
	return out, nil
}

// names lists every volume of the host as pool/name, sorted, space-separated.
func (h *fakeHost) names() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return strings.Join(slices.Sorted(maps.Keys(h.vols)), " ")
}
