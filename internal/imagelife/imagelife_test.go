package imagelife

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/image"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// fakeHost keeps volumes and their backing files in memory.
type fakeHost struct {
	vols    map[string]*virt.VolumeDetail // pool/name
	backing map[string][]string           // path -> overlays backed by it
	fail    map[string]error              // "info", "backed", "delete"
	deleted []string
}

func (h *fakeHost) UploadImage(_ context.Context, up virt.ImageUpload) (*virt.VolumeDetail, error) {
	b, err := io.ReadAll(up.Source)
	if err != nil {
		return nil, err
	}
	if int64(len(b)) != up.Length {
		return nil, fmt.Errorf("read %d bytes, want %d", len(b), up.Length)
	}
	up.Progress(up.Length)
	v := &virt.VolumeDetail{Path: "/pools/" + up.Pool + "/" + up.Name, Format: up.Format, CapacityBytes: int64(up.Capacity)}
	h.vols[up.Pool+"/"+up.Name] = v
	return v, nil
}

func (h *fakeHost) VolumeInfo(_ context.Context, pool, name string) (*virt.VolumeDetail, error) {
	if err := h.fail["info"]; err != nil {
		return nil, err
	}
	v, ok := h.vols[pool+"/"+name]
	if !ok {
		return nil, fmt.Errorf("volume %w", virt.ErrNotFound)
	}
	return v, nil
}

func (h *fakeHost) BackedBy(_ context.Context, path string) ([]string, error) {
	if err := h.fail["backed"]; err != nil {
		return nil, err
	}
	return h.backing[path], nil
}

func (h *fakeHost) RemoveVolume(_ context.Context, pool, name string) error {
	if err := h.fail["delete"]; err != nil {
		return err
	}
	h.deleted = append(h.deleted, pool+"/"+name)
	delete(h.vols, pool+"/"+name)
	return nil
}

func newHost() *fakeHost {
	return &fakeHost{vols: map[string]*virt.VolumeDetail{}, backing: map[string][]string{}, fail: map[string]error{}}
}

func TestUploadThenRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := newHost()
	var sent int64
	res := &image.Result{Format: "qcow2", Size: 5, VirtualSize: 2 << 30}
	vol, err := Upload(ctx, h, "default", "debian", res, strings.NewReader("qcow!"), func(n int64) { sent = n })
	if err != nil {
		t.Fatal(err)
	}
	if vol.Format != "qcow2" || vol.CapacityBytes != 2<<30 || sent != 5 {
		t.Errorf("volume %+v, %d sent", vol, sent)
	}
	if got, err := Read(ctx, h, "default", "debian"); err != nil || got.Path != vol.Path {
		t.Errorf("read %+v, %v", got, err)
	}
	if _, err := Read(ctx, h, "default", "other"); !errors.Is(err, ErrGone) {
		t.Errorf("read of a missing volume: %v, want ErrGone", err)
	}
}

func TestDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	boom := errors.New("injected")
	for name, tc := range map[string]struct {
		setup   func(h *fakeHost)
		check   func(error) bool
		deleted bool
	}{
		"unused": {setup: func(*fakeHost) {}, check: func(err error) bool { return err == nil }, deleted: true},
		"gone":   {setup: func(h *fakeHost) { delete(h.vols, "default/debian") }, check: func(err error) bool { return err == nil }},
		"backing": {setup: func(h *fakeHost) { h.backing["/pools/default/debian"] = []string{"default/vm1.qcow2"} }, check: func(err error) bool {
			var e *InUseError
			return errors.As(err, &e) && strings.Contains(err.Error(), "default/vm1.qcow2")
		}},
		"listing": {setup: func(h *fakeHost) { h.fail["backed"] = boom }, check: func(err error) bool {
			var e *BackingListError
			return errors.As(err, &e) && errors.Is(err, boom)
		}},
		"info":   {setup: func(h *fakeHost) { h.fail["info"] = boom }, check: func(err error) bool { return errors.Is(err, boom) }},
		"delete": {setup: func(h *fakeHost) { h.fail["delete"] = boom }, check: func(err error) bool { return errors.Is(err, boom) }},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			h := newHost()
			h.vols["default/debian"] = &virt.VolumeDetail{Path: "/pools/default/debian"}
			tc.setup(h)
			err := Delete(ctx, h, "default", "debian")
			if !tc.check(err) || (len(h.deleted) > 0) != tc.deleted {
				t.Errorf("err %v, deleted %v", err, h.deleted)
			}
		})
	}
}
