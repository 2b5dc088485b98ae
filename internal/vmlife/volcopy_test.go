package vmlife

import (
	"bytes"
	"context"
	"errors"
	"io"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// memVolumes is a host's pools held in memory: "pool/name" -> file bytes.
type memVolumes struct {
	files   map[string][]byte
	info    map[string]hostapi.VolumeDetail
	corrupt bool // flips a byte of what an upload writes
	removed []string
}

func newMem() *memVolumes {
	return &memVolumes{files: map[string][]byte{}, info: map[string]hostapi.VolumeDetail{}}
}

func (m *memVolumes) VolumeInfo(_ context.Context, pool, name string) (*hostapi.VolumeDetail, error) {
	d, ok := m.info[pool+"/"+name]
	if !ok {
		return nil, hostapi.ErrNotFound
	}
	return &d, nil
}

func (m *memVolumes) VolumeLength(_ context.Context, pool, name string) (int64, error) {
	return int64(len(m.files[pool+"/"+name])), nil
}

func (m *memVolumes) StreamVolume(_ context.Context, pool, name string, length int64, w io.Writer) error {
	// Small writes, as stream packets come.
	b := m.files[pool+"/"+name][:length]
	for len(b) > 0 {
		n := min(len(b), 3)
		if _, err := w.Write(b[:n]); err != nil {
			return err
		}
		b = b[n:]
	}
	return nil
}

func (m *memVolumes) UploadImage(_ context.Context, up hostapi.ImageUpload) (*hostapi.VolumeDetail, error) {
	key := up.Pool + "/" + up.Name
	if _, ok := m.files[key]; ok {
		return nil, &virt.VolumeExistsError{Pool: up.Pool, Name: up.Name}
	}
	data, err := io.ReadAll(up.Source)
	if err != nil {
		return nil, err
	}
	if int64(len(data)) != up.Length {
		return nil, errors.New("short upload")
	}
	if m.corrupt {
		data[len(data)/2] ^= 1
	}
	m.files[key] = data
	d := hostapi.VolumeDetail{Pool: up.Pool, Name: up.Name, Format: up.Format, CapacityBytes: int64(up.Capacity)}
	m.info[key] = d
	return &d, nil
}

func (m *memVolumes) RemoveVolume(_ context.Context, pool, name string) error {
	delete(m.files, pool+"/"+name)
	delete(m.info, pool+"/"+name)
	m.removed = append(m.removed, pool+"/"+name)
	return nil
}

func TestCopyVolumeCopiesAndVerifies(t *testing.T) {
	t.Parallel()
	src, dst := newMem(), newMem()
	data := bytes.Repeat([]byte("kohaku-move "), 1000)
	src.files["default/vm-1"] = data
	src.info["default/vm-1"] = hostapi.VolumeDetail{Pool: "default", Name: "vm-1", Format: "qcow2", CapacityBytes: 1 << 30}
	got, err := copyVerified(context.Background(), src, "default", "vm-1", dst, "default", "vm-1")
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(dst.files["default/vm-1"], data) || got.Bytes != int64(len(data)) {
		t.Fatalf("target holds %d bytes (%d reported), want the source's %d", len(dst.files["default/vm-1"]), got.Bytes, len(data))
	}
	// Made raw, as long as the file: the file's own bytes say qcow2.
	if d := dst.info["default/vm-1"]; d.Format != "raw" || d.CapacityBytes != int64(len(data)) {
		t.Fatalf("target volume made as %+v, want raw of the file's length", d)
	}
	if len(got.SHA256) != 64 {
		t.Fatalf("digest %q", got.SHA256)
	}
}

func TestCopyVolumeDeletesWhatDoesNotVerify(t *testing.T) {
	t.Parallel()
	src, dst := newMem(), newMem()
	dst.corrupt = true
	src.files["p/seed"] = []byte("an iso, say")
	src.info["p/seed"] = hostapi.VolumeDetail{Pool: "p", Name: "seed", CapacityBytes: 11}
	_, err := copyVerified(context.Background(), src, "p", "seed", dst, "p", "seed")
	if err == nil || !strings.Contains(err.Error(), "hash to") {
		t.Fatalf("err = %v, want a digest mismatch", err)
	}
	if _, ok := dst.files["p/seed"]; ok {
		t.Fatal("the mismatched copy was left on the target")
	}
}

func TestCopyVolumeRefusesAnOverlay(t *testing.T) {
	t.Parallel()
	src, dst := newMem(), newMem()
	src.files["p/ov"] = []byte("qcow2")
	src.info["p/ov"] = hostapi.VolumeDetail{Pool: "p", Name: "ov", Format: "qcow2", BackingPath: "/img/base.qcow2"}
	_, err := copyVerified(context.Background(), src, "p", "ov", dst, "p", "ov")
	if !errors.Is(err, errBackedVolume) {
		t.Fatalf("err = %v, want errBackedVolume", err)
	}
	if len(dst.files) != 0 {
		t.Fatal("something was uploaded")
	}
}

func TestCopyVolumeToAnotherName(t *testing.T) {
	t.Parallel()
	src, dst := newMem(), newMem()
	src.files["p/x"] = []byte("raw bytes")
	src.info["p/x"] = hostapi.VolumeDetail{Pool: "p", Name: "x", CapacityBytes: 9}
	if _, err := copyVerified(context.Background(), src, "p", "x", dst, "q", "y"); err != nil {
		t.Fatal(err)
	}
	if dst.info["q/y"].Format != "raw" || string(dst.files["q/y"]) != "raw bytes" {
		t.Fatalf("target %+v %q", dst.info["q/y"], dst.files["q/y"])
	}
}
