package backup

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"
	"testing"
)

func request() Request {
	return Request{VM: vmUUID, Snapshot: "before", Disk: "data", Pool: "backups", Name: "src-data.backup.qcow2"}
}

func digestOf(b []byte) string { return fmt.Sprintf("sha256:%x", sha256.Sum256(b)) }

const before = "vms/src-data.qcow2.snap-before"

// A backup is the snapshot's copy of the disk, byte for byte, on the
// other host, with a manifest that records what it is and its digest; it
// reads back, verifies, is listed, and its delete leaves nothing.
func TestMakeOpenVerifyListDelete(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src, dst := newHost().withVM(), newHost()
	var said []string
	req := request()
	req.Progress = func(l string) { said = append(said, l) }
	b, err := Make(ctx, src, dst, req)
	if err != nil {
		t.Fatal(err)
	}
	want := src.vols[before]
	if string(dst.vols["backups/src-data.backup.qcow2"]) != string(want) || b.SHA256 != digestOf(want) || b.Bytes != int64(len(want)) {
		t.Fatalf("backup %+v holds %q", b, dst.vols["backups/src-data.backup.qcow2"])
	}
	if b.VMUUID != vmUUID || b.VMName != "src" || b.Disk != "data" || b.Snapshot != "before" || b.From != before || b.Path != "/backups/src-data.backup.qcow2" {
		t.Errorf("manifest %+v", b.Manifest)
	}
	if len(said) != 2 {
		t.Errorf("progress %q", said)
	}
	got, err := Open(ctx, dst, "backups", "src-data.backup.qcow2")
	if err != nil || got.Manifest != b.Manifest || got.Pool != "backups" {
		t.Fatalf("open: %+v, %v; made %+v", got, err, b)
	}
	if err := Verify(ctx, dst, got); err != nil {
		t.Error(err)
	}
	if names, err := List(ctx, dst, "backups"); err != nil || strings.Join(names, ",") != "src-data.backup.qcow2" {
		t.Errorf("list %v, %v", names, err)
	}
	if err := Delete(ctx, dst, "backups", "src-data.backup.qcow2"); err != nil {
		t.Fatal(err)
	}
	if dst.names() != "" {
		t.Errorf("left after the delete: %s", dst.names())
	}
	if err := Delete(ctx, dst, "backups", "src-data.backup.qcow2"); err != nil {
		t.Errorf("a delete of what is gone: %v", err)
	}
	if _, err := Open(ctx, dst, "backups", "src-data.backup.qcow2"); !errors.Is(err, ErrGone) {
		t.Errorf("open of a deleted backup: %v, want ErrGone", err)
	}
}

// Same host, other pool: the source is left as it was.
func TestMakeSameHostOtherPool(t *testing.T) {
	t.Parallel()
	h := newHost().withVM()
	want := string(h.vols[before])
	if _, err := Make(context.Background(), h, h, request()); err != nil {
		t.Fatal(err)
	}
	if string(h.vols[before]) != want || string(h.vols["backups/src-data.backup.qcow2"]) != want {
		t.Errorf("volumes %s", h.names())
	}
}

// Bad input is refused before anything is copied, saying what there is.
func TestMakeRefusals(t *testing.T) {
	t.Parallel()
	for name, tc := range map[string]struct {
		edit  func(*Request, *fakeHost, *fakeHost)
		check func(error) bool
	}{
		"unknown disk": {edit: func(r *Request, _, _ *fakeHost) { r.Disk = "logs" }, check: func(err error) bool {
			return errors.Is(err, ErrUnknownDisk) && strings.Contains(err.Error(), `its disks are "boot", "data"`)
		}},
		"no such snapshot": {edit: func(r *Request, _, _ *fakeHost) { r.Snapshot = "after" }, check: func(err error) bool {
			return errors.Is(err, ErrNoSnapshot) && strings.Contains(err.Error(), "vms/src-data.qcow2.snap-after")
		}},
		"bad name": {edit: func(r *Request, _, _ *fakeHost) { r.Name = "x.kohaku-backup" }, check: func(err error) bool {
			return err != nil && strings.Contains(err.Error(), "not a backup volume name")
		}},
		"manifest taken": {edit: func(_ *Request, _, dst *fakeHost) {
			dst.vols["backups/src-data.backup.qcow2.kohaku-backup"] = []byte("theirs")
		}, check: func(err error) bool { return err != nil && strings.Contains(err.Error(), "never overwrites") }},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			src, dst := newHost().withVM(), newHost()
			req := request()
			tc.edit(&req, src, dst)
			before := dst.names()
			_, err := Make(context.Background(), src, dst, req)
			if !tc.check(err) {
				t.Fatalf("err %v", err)
			}
			if dst.names() != before {
				t.Errorf("the target changed: %s, was %s", dst.names(), before)
			}
		})
	}
}

// A copy that does not land as read, whose manifest cannot be written, or
// that is interrupted (Ctrl-C) leaves neither volume.
func TestMakeFailuresLeaveNothing(t *testing.T) {
	t.Parallel()
	boom := errors.New("injected")
	for name, tc := range map[string]struct {
		setup func(src, dst *fakeHost, cancel context.CancelFunc)
		want  string
	}{
		"corrupted on landing": {func(_, dst *fakeHost, _ context.CancelFunc) { dst.corrupt = "src-data.backup.qcow2" }, "the volume that landed holds"},
		"manifest upload fails": {func(_, dst *fakeHost, _ context.CancelFunc) {
			dst.failUpload["src-data.backup.qcow2.kohaku-backup"] = boom
		}, "injected (the copy was deleted)"},
		// The source's stream is cut after its first chunk.
		"interrupted midway": {func(src, _ *fakeHost, cancel context.CancelFunc) { src.cancelAt, src.cancel = 7, cancel }, "context canceled"},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			src, dst := newHost().withVM(), newHost()
			tc.setup(src, dst, cancel)
			if _, err := Make(ctx, src, dst, request()); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want one saying %q", err, tc.want)
			}
			if dst.names() != "" {
				t.Errorf("left: %s", dst.names())
			}
		})
	}
}

// A volume with no manifest (a copy cut off before it was verified, the
// process killed), or with one cut short, is not a backup: not opened,
// not listed.
func TestVolumeWithoutWholeManifestIsNoBackup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dst := newHost()
	dst.vols["backups/half.qcow2"] = []byte("QFI\xfb half")
	dst.vols["backups/cut.qcow2"] = []byte("QFI\xfb cut")
	dst.vols["backups/cut.qcow2.kohaku-backup"] = []byte(`{"kind": "kohaku_backup", "version": 1, "volume": "cut.qc`)
	dst.vols["backups/orphan.qcow2.kohaku-backup"] = []byte(`{}`)
	for _, n := range []string{"half.qcow2", "cut.qcow2"} {
		if _, err := Open(ctx, dst, "backups", n); !errors.Is(err, ErrNotBackup) {
			t.Errorf("open %s: %v, want ErrNotBackup", n, err)
		}
	}
	if names, err := List(ctx, dst, "backups"); err != nil || strings.Join(names, ",") != "cut.qcow2" {
		// Listing reads no manifest: cut.qcow2 is listed, and its open
		// (what an import does) refuses it.
		t.Errorf("list %v, %v", names, err)
	}
}

// A backup changed after it was made no longer verifies.
func TestVerifyFindsAChangedBackup(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src, dst := newHost().withVM(), newHost()
	b, err := Make(ctx, src, dst, request())
	if err != nil {
		t.Fatal(err)
	}
	dst.vols["backups/src-data.backup.qcow2"][5] ^= 1
	var m *MismatchError
	if err := Verify(ctx, dst, b); !errors.As(err, &m) || m.Recorded != b.SHA256 {
		t.Errorf("verify of a changed backup: %v", err)
	}
}
