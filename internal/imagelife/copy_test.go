package imagelife

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// streamHost keeps volumes' bytes in memory and streams them in small
// chunks, as libvirt streams packets.
type streamHost struct {
	data    map[string][]byte
	info    map[string]*virt.VolumeDetail
	corrupt bool  // the upload lands one byte changed
	failOut error // StreamVolumeOut fails after the first chunk
	failIn  error // StreamVolumeIn fails after the first chunk
	deleted []string
}

func newStreamHost() *streamHost {
	return &streamHost{data: map[string][]byte{}, info: map[string]*virt.VolumeDetail{}}
}

func (h *streamHost) VolumeInfo(_ context.Context, pool, name string) (*virt.VolumeDetail, error) {
	v, ok := h.info[pool+"/"+name]
	if !ok {
		return nil, fmt.Errorf("%s/%s: %w", pool, name, virt.ErrVolumeNotFound)
	}
	return v, nil
}

func (h *streamHost) StreamVolumeOut(ctx context.Context, pool, name string, w io.Writer) error {
	b := h.data[pool+"/"+name]
	for i := 0; i < len(b); i += 7 {
		if i > 0 && h.failOut != nil {
			return h.failOut
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := w.Write(b[i:min(i+7, len(b))]); err != nil {
			return err
		}
	}
	return nil
}

func (h *streamHost) StreamVolumeIn(_ context.Context, pool, name, format string, capacity int64, r io.Reader) (*virt.VolumeDetail, error) {
	if _, ok := h.info[pool+"/"+name]; ok {
		return nil, &virt.VolumeExistsError{Pool: pool, Name: name}
	}
	var buf bytes.Buffer
	chunk := make([]byte, 5)
	for {
		n, err := r.Read(chunk)
		buf.Write(chunk[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if h.failIn != nil {
			return nil, h.failIn
		}
	}
	b := buf.Bytes()
	if h.corrupt && len(b) > 0 {
		b[0] ^= 1
	}
	h.data[pool+"/"+name] = b
	v := &virt.VolumeDetail{Pool: pool, Name: name, Path: "/" + pool + "/" + name, Format: format, CapacityBytes: capacity}
	h.info[pool+"/"+name] = v
	return v, nil
}

func (h *streamHost) HashVolume(ctx context.Context, pool, name string) (virt.ImageDigest, error) {
	s := sha256.New()
	var n int
	err := h.StreamVolumeOut(ctx, pool, name, writerFunc(func(p []byte) (int, error) { n += len(p); return s.Write(p) }))
	return hostapi.DigestOf(s, int64(n)), err
}

func (h *streamHost) RemoveVolume(_ context.Context, pool, name string) error {
	h.deleted = append(h.deleted, pool+"/"+name)
	delete(h.data, pool+"/"+name)
	delete(h.info, pool+"/"+name)
	return nil
}

const golden = "QFI\xfb a golden image, longer than one stream chunk"

func sourceHost() *streamHost {
	h := newStreamHost()
	h.data["images/golden.qcow2"] = []byte(golden)
	h.info["images/golden.qcow2"] = &virt.VolumeDetail{Pool: "images", Name: "golden.qcow2", Format: "qcow2", CapacityBytes: 8 << 30}
	return h
}

func goldenDigest() string {
	s := sha256.Sum256([]byte(golden))
	return fmt.Sprintf("sha256:%x", s)
}

func TestCopyVerifiesWhatLanded(t *testing.T) {
	t.Parallel()
	src, dst := sourceHost(), newStreamHost()
	got, err := Copy(context.Background(), src, "images", "golden.qcow2", dst, "default", "golden.qcow2", goldenDigest())
	if err != nil {
		t.Fatal(err)
	}
	if got.Digest.String() != goldenDigest() || got.Digest.Bytes != int64(len(golden)) {
		t.Errorf("digest %+v, want %s", got.Digest, goldenDigest())
	}
	if string(dst.data["default/golden.qcow2"]) != golden || got.Volume.Format != "qcow2" || got.Volume.CapacityBytes != 8<<30 {
		t.Errorf("landed %q as %+v", dst.data["default/golden.qcow2"], got.Volume)
	}
}

func TestCopySameHostOtherPool(t *testing.T) {
	t.Parallel()
	h := sourceHost()
	if _, err := Copy(context.Background(), h, "images", "golden.qcow2", h, "default", "golden.qcow2", ""); err != nil {
		t.Fatal(err)
	}
	if string(h.data["default/golden.qcow2"]) != golden || string(h.data["images/golden.qcow2"]) != golden {
		t.Errorf("volumes %q", h.data)
	}
}

func TestCopyFailuresLeaveNoVolume(t *testing.T) {
	t.Parallel()
	boom := errors.New("injected")
	for name, tc := range map[string]struct {
		setup func(src, dst *streamHost)
		want  string
		check func(error) bool
	}{
		"corrupted on landing": {setup: func(_, dst *streamHost) { dst.corrupt = true }, check: func(err error) bool {
			var m *DigestMismatchError
			return errors.As(err, &m) && m.Read.String() == goldenDigest()
		}},
		"source changed": {setup: func(src, _ *streamHost) { src.data["images/golden.qcow2"] = []byte("tampered") }, check: func(err error) bool {
			return errors.Is(err, ErrSourceChanged)
		}},
		"download fails": {setup: func(src, _ *streamHost) { src.failOut = boom }, check: func(err error) bool { return errors.Is(err, boom) }},
		"upload fails":   {setup: func(_, dst *streamHost) { dst.failIn = boom }, check: func(err error) bool { return errors.Is(err, boom) }},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			src, dst := sourceHost(), newStreamHost()
			tc.setup(src, dst)
			_, err := Copy(context.Background(), src, "images", "golden.qcow2", dst, "default", "golden.qcow2", goldenDigest())
			if !tc.check(err) {
				t.Fatalf("err %v", err)
			}
			if _, left := dst.data["default/golden.qcow2"]; left {
				t.Errorf("a volume was left after %v", err)
			}
		})
	}
}

func TestCopyRefusesOverlaysAndExistingVolumes(t *testing.T) {
	t.Parallel()
	src := sourceHost()
	src.info["images/vm-root.qcow2"] = &virt.VolumeDetail{Format: "qcow2", BackingPath: "/images/golden.qcow2"}
	if _, err := Copy(context.Background(), src, "images", "vm-root.qcow2", newStreamHost(), "default", "x", ""); err == nil || !strings.Contains(err.Error(), "overlay") {
		t.Errorf("copy of an overlay: %v", err)
	}
	dst := newStreamHost()
	dst.data["default/golden.qcow2"] = []byte("theirs")
	dst.info["default/golden.qcow2"] = &virt.VolumeDetail{}
	_, err := Copy(context.Background(), src, "images", "golden.qcow2", dst, "default", "golden.qcow2", "")
	var exists *virt.VolumeExistsError
	if !errors.As(err, &exists) || string(dst.data["default/golden.qcow2"]) != "theirs" || len(dst.deleted) != 0 {
		t.Errorf("copy over an existing volume: %v; it holds %q, deleted %v", err, dst.data["default/golden.qcow2"], dst.deleted)
	}
}
