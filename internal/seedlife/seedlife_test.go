package seedlife

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/seed"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// fakeHost keeps volumes in memory, as a pool would.
type fakeHost struct {
	vols  map[string][]byte
	reads []int64 // the offset of each read
	fail  error
}

func (h *fakeHost) UploadVolume(_ context.Context, pool, name string, data []byte) (*virt.VolumeDetail, error) {
	if h.fail != nil {
		return nil, h.fail
	}
	key := pool + "/" + name
	if _, ok := h.vols[key]; ok {
		return nil, fmt.Errorf("volume %s exists", key)
	}
	h.vols[key] = append([]byte(nil), data...)
	return h.volume(pool, name), nil
}

func (h *fakeHost) volume(pool, name string) *virt.VolumeDetail {
	return &virt.VolumeDetail{Pool: pool, Name: name, Key: "/pools/" + pool + "/" + name, Path: "/pools/" + pool + "/" + name,
		CapacityBytes: int64(len(h.vols[pool+"/"+name]))}
}

func (h *fakeHost) ReadVolumeAt(_ context.Context, pool, name string, offset, limit int64) (*virt.VolumeDetail, []byte, error) {
	data, ok := h.vols[pool+"/"+name]
	if !ok {
		return nil, nil, fmt.Errorf("volume %s/%s %w", pool, name, virt.ErrNotFound)
	}
	h.reads = append(h.reads, offset)
	if offset > int64(len(data)) {
		offset = int64(len(data))
	}
	data = data[offset:]
	if int64(len(data)) > limit {
		data = data[:limit]
	}
	return h.volume(pool, name), data, nil
}

func (h *fakeHost) RemoveVolume(_ context.Context, pool, name string) error {
	if _, ok := h.vols[pool+"/"+name]; !ok {
		return fmt.Errorf("volume %s/%s %w", pool, name, virt.ErrNotFound)
	}
	delete(h.vols, pool+"/"+name)
	return nil
}

func render(t *testing.T) *seed.Result {
	t.Helper()
	r, err := seed.Render(&seed.Spec{Name: "vm1", Hostname: "vm1", QEMUGuestAgent: true})
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// A refresh reads past the system area and still finds the digest of the
// whole ISO; an import reads it whole and learns what it holds.
func TestStoreThenReadBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := &fakeHost{vols: map[string][]byte{}}
	res := render(t)
	st, err := Store(ctx, h, "default", "vm1-seed.iso", res.ISO)
	if err != nil {
		t.Fatal(err)
	}
	if st.SizeBytes != int64(len(res.ISO)) || st.Path == "" {
		t.Errorf("stored %+v", st)
	}
	refresh, err := ReadBack(ctx, h, "default", "vm1-seed.iso", false)
	if err != nil {
		t.Fatal(err)
	}
	if refresh.SHA256 != res.ISOSHA256 || refresh.Inspection != nil || h.reads[0] != seed.SystemAreaBytes {
		t.Errorf("refresh: sha %s want %s, inspected %v, read from %d", refresh.SHA256, res.ISOSHA256, refresh.Inspection != nil, h.reads[0])
	}
	imported, err := ReadBack(ctx, h, "default", "vm1-seed.iso", true)
	if err != nil {
		t.Fatal(err)
	}
	if imported.SHA256 != res.ISOSHA256 || imported.InspectErr != nil || imported.Inspection.Format != seed.FormatNoCloud || h.reads[1] != 0 {
		t.Errorf("import: sha %s, inspection %+v (%v), read from %d", imported.SHA256, imported.Inspection, imported.InspectErr, h.reads[1])
	}
}

func TestReadBackOfWhatIsNoSeed(t *testing.T) {
	t.Parallel()
	h := &fakeHost{vols: map[string][]byte{"default/data.raw": make([]byte, 64<<10)}}
	got, err := ReadBack(context.Background(), h, "default", "data.raw", true)
	if err != nil || got.InspectErr == nil || got.Inspection != nil {
		t.Errorf("got %+v, %v", got, err)
	}
}

func TestDeleteThenGone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	h := &fakeHost{vols: map[string][]byte{}}
	if _, err := Store(ctx, h, "default", "s.iso", render(t).ISO); err != nil {
		t.Fatal(err)
	}
	if err := Delete(ctx, h, "default", "s.iso"); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadBack(ctx, h, "default", "s.iso", false); !errors.Is(err, ErrGone) {
		t.Errorf("read after delete: %v, want ErrGone", err)
	}
	h.fail = errors.New("injected")
	if _, err := Store(ctx, h, "default", "s.iso", nil); !errors.Is(err, h.fail) {
		t.Errorf("store: %v", err)
	}
}
