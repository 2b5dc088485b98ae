package backup

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/imagelife"
	"github.com/kohaku/terraform-provider-kohaku/internal/snapshot"
)

// Source is the host of the snapshot a backup is made from.
// internal/hosts/libvirthost checks that *virt.Client is one.
type Source interface {
	snapshot.Host
	imagelife.CopySource
}

// Target is the host a backup is kept on.
// internal/hosts/libvirthost checks that *virt.Client is one.
type Target interface {
	imagelife.CopyTarget
	VolumeInfo(ctx context.Context, pool, name string) (*hostapi.VolumeDetail, error)
	VolumeExists(ctx context.Context, pool, name string) (bool, error)
	UploadVolume(ctx context.Context, pool, name string, data []byte) (*hostapi.VolumeDetail, error)
	DownloadVolume(ctx context.Context, pool, name string, limit int64) ([]byte, error)
	ListVolumeNames(ctx context.Context, pool string) ([]string, error)
}

// ErrUnknownDisk is a backup of a disk the snapshot's VM does not have.
var ErrUnknownDisk = errors.New("the snapshot has no such disk")

// ErrNoSnapshot is a backup of a snapshot whose copy of the disk is not on
// its host.
var ErrNoSnapshot = errors.New("the snapshot's copy of the disk is not on its host")

// ErrGone is a backup whose volume is no longer on its host.
var ErrGone = errors.New("the backup's volume is gone")

// ErrNotBackup is a volume without a manifest that makes it a backup: a
// copy cut off before it was verified, or a volume of another making.
var ErrNotBackup = errors.New("the volume is not a backup")

// manifestSuffix ends the name of a backup's manifest volume.
const manifestSuffix = ".kohaku-backup"

// manifestLimit bounds the manifest read back.
const manifestLimit = 64 << 10

// nameRE is what a backup's volume name may be.
var nameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,199}$`)

// CheckName says what is wrong with a backup's volume name, or nil.
func CheckName(name string) error {
	if !nameRE.MatchString(name) || strings.HasSuffix(name, manifestSuffix) {
		return fmt.Errorf("%q is not a backup volume name: use 1 to 200 letters, digits, '.', '_' and '-', starting "+
			"with a letter or digit, not ending in %s, e.g. db-data.backup.qcow2", name, manifestSuffix)
	}
	return nil
}

// diskRE is what a snapshot calls a disk: "boot" or a data disk's serial.
var diskRE = regexp.MustCompile(`^[A-Za-z0-9._-]{1,20}$`)

// CheckDisk says what is wrong with the name of a snapshot's disk, or nil.
func CheckDisk(disk string) error {
	if !diskRE.MatchString(disk) {
		return fmt.Errorf("%q is not a disk of a snapshot: use \"boot\" or a data disk's serial (1 to 20 letters, digits, '.', '_' and '-')", disk)
	}
	return nil
}

// ManifestVolume is the name of the manifest volume of the backup volume
// name, in its pool.
func ManifestVolume(name string) string { return name + manifestSuffix }

// IsManifest reports whether a volume's name is that of a backup's
// manifest, and of which backup volume.
func IsManifest(name string) (backup string, ok bool) { return strings.CutSuffix(name, manifestSuffix) }

// Manifest is what a backup records beside its volume: what it is a copy
// of and what its bytes hash to.
type Manifest struct {
	// Kind is always "kohaku_backup", Version 1.
	Kind    string `json:"kind"`
	Version int    `json:"version"`
	Volume  string `json:"volume"`
	// SHA256 is `sha256:<hex>` of the volume's bytes, Bytes their count.
	SHA256        string `json:"sha256"`
	Bytes         int64  `json:"bytes"`
	CapacityBytes int64  `json:"capacity_bytes"`
	Format        string `json:"format"`
	// What it is a copy of.
	VMUUID   string `json:"vm_uuid"`
	VMName   string `json:"vm_name"`
	Snapshot string `json:"snapshot"`
	Disk     string `json:"disk"`
	From     string `json:"from"` // <pool>/<volume> of the snapshot's copy
	// FromHost is the key of the provider's hosts map the snapshot is on,
	// empty for the provider's own host.
	FromHost string `json:"from_host,omitempty"`
	Created  string `json:"created_at"`
}

const manifestKind = "kohaku_backup"

// parseManifest reads a manifest, refusing one that is cut short or not a
// backup's.
func parseManifest(data []byte, volume string) (*Manifest, error) {
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		return nil, fmt.Errorf("%w: its manifest %s does not read (%v)", ErrNotBackup, ManifestVolume(volume), err)
	}
	if m.Kind != manifestKind || m.Version != 1 || m.Volume != volume || !strings.HasPrefix(m.SHA256, "sha256:") {
		return nil, fmt.Errorf("%w: its manifest %s is not that of a version 1 backup of %s", ErrNotBackup, ManifestVolume(volume), volume)
	}
	return &m, nil
}

// Backup is a backup as made or read.
type Backup struct {
	Manifest
	Pool string
	Path string
}

// Request is one backup to make.
type Request struct {
	// VM is the UUID of the snapshot's VM, Snapshot its name, Disk "boot"
	// or a data disk's serial, as the snapshot records them.
	VM, Snapshot, Disk string
	// SourceHost is the key of the provider's hosts map the snapshot is
	// on ("" for the provider's own host), recorded for an import.
	SourceHost string
	// Pool and Name are the backup volume's on the target.
	Pool, Name string
	// Progress receives a line per step; nil discards them.
	Progress func(string)
}

// Locate finds the snapshot's copy of the disk on the source host: the
// disk must be one of the VM's (ErrUnknownDisk, naming those it has) and
// its copy must be there (ErrNoSnapshot).
func Locate(ctx context.Context, src Source, vm, snap, disk string) (snapshot.Disk, string, error) {
	t, err := snapshot.Find(ctx, src, vm)
	if err != nil {
		return snapshot.Disk{}, "", err
	}
	var names []string
	for _, d := range t.Disks {
		names = append(names, d.Disk)
		if d.Disk != disk {
			continue
		}
		vol := snapshot.SnapVolume(d.Volume, snap)
		ok, err := src.VolumeExists(ctx, d.Pool, vol)
		if err != nil {
			return snapshot.Disk{}, "", fmt.Errorf("looking up %s/%s: %w", d.Pool, vol, err)
		}
		if !ok {
			return snapshot.Disk{}, "", fmt.Errorf("%w: %s/%s, the snapshot %q of %s's %s disk, is not there", ErrNoSnapshot, d.Pool, vol, snap, t.VM.Name, disk)
		}
		return d, vol, nil
	}
	return snapshot.Disk{}, "", fmt.Errorf("%w: %s has no disk %q; its disks are %s (\"boot\", or a data disk's serial)",
		ErrUnknownDisk, t.VM.Name, disk, quoted(names))
}

func quoted(names []string) string {
	q := make([]string, len(names))
	for i, n := range names {
		q[i] = fmt.Sprintf("%q", n)
	}
	return strings.Join(q, ", ")
}

// Make copies the snapshot's copy of the disk into the backup volume
// pool/name of dst, through this process, verified by digest (what landed
// reads as what was read), then writes the manifest that makes it a
// backup. Neither name is ever overwritten. A copy that fails, does not
// match or is interrupted is deleted; one cut off so hard that it could
// not be (the process killed) has no manifest and is never read as a
// backup.
func Make(ctx context.Context, src Source, dst Target, req Request) (*Backup, error) {
	if err := CheckName(req.Name); err != nil {
		return nil, err
	}
	d, from, err := Locate(ctx, src, req.VM, req.Snapshot, req.Disk)
	if err != nil {
		return nil, err
	}
	taken, err := dst.VolumeExists(ctx, req.Pool, ManifestVolume(req.Name))
	if err != nil {
		return nil, fmt.Errorf("looking up %s/%s: %w", req.Pool, ManifestVolume(req.Name), err)
	}
	if taken {
		return nil, fmt.Errorf("the volume %s/%s exists already, and Kohaku never overwrites it: the manifest of "+
			"another backup named %q in this pool. Choose another name, or import that backup (terraform import)",
			req.Pool, ManifestVolume(req.Name), req.Name)
	}
	ref, err := src.LookupDomain(ctx, req.VM)
	if err != nil {
		return nil, err
	}
	say(req.Progress, fmt.Sprintf("copying %s/%s (the snapshot %q of %s's %s disk) into %s/%s", d.Pool, from, req.Snapshot, ref.Name, req.Disk, req.Pool, req.Name))
	got, err := imagelife.Copy(ctx, src, d.Pool, from, dst, req.Pool, req.Name, "")
	if err != nil {
		return nil, err
	}
	m := Manifest{
		Kind: manifestKind, Version: 1, Volume: req.Name, SHA256: got.Digest.String(), Bytes: got.Digest.Bytes,
		CapacityBytes: got.Volume.CapacityBytes, Format: got.Volume.Format, VMUUID: ref.UUID, VMName: ref.Name,
		Snapshot: req.Snapshot, Disk: req.Disk, From: d.Pool + "/" + from, FromHost: req.SourceHost, Created: time.Now().UTC().Format(time.RFC3339),
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	say(req.Progress, fmt.Sprintf("verified %s; writing its manifest %s", got.Digest, ManifestVolume(req.Name)))
	if _, err := dst.UploadVolume(ctx, req.Pool, ManifestVolume(req.Name), append(data, '\n')); err != nil {
		err = fmt.Errorf("writing the manifest %s/%s: %w", req.Pool, ManifestVolume(req.Name), err)
		if derr := dst.RemoveVolume(context.WithoutCancel(ctx), req.Pool, req.Name); derr != nil {
			return nil, fmt.Errorf("%w (deleting the copy failed: %v; delete %s/%s by hand)", err, derr, req.Pool, req.Name)
		}
		return nil, fmt.Errorf("%w (the copy was deleted)", err)
	}
	return &Backup{Manifest: m, Pool: req.Pool, Path: got.Volume.Path}, nil
}

// Open reads the backup pool/name from its host: its volume (ErrGone when
// it is not there) and its manifest (ErrNotBackup when it has none or one
// that does not read).
func Open(ctx context.Context, h Target, pool, name string) (*Backup, error) {
	vol, err := h.VolumeInfo(ctx, pool, name)
	if errors.Is(err, hostapi.ErrNotFound) {
		return nil, fmt.Errorf("%s/%s: %w", pool, name, ErrGone)
	}
	if err != nil {
		return nil, fmt.Errorf("reading %s/%s: %w", pool, name, err)
	}
	data, err := h.DownloadVolume(ctx, pool, ManifestVolume(name), manifestLimit)
	if errors.Is(err, hostapi.ErrNotFound) {
		return nil, fmt.Errorf("%w: %s/%s has no manifest %s beside it: a copy cut off before it was verified, or a "+
			"volume Kohaku did not back up", ErrNotBackup, pool, name, ManifestVolume(name))
	}
	if err != nil {
		return nil, fmt.Errorf("reading the manifest %s/%s: %w", pool, ManifestVolume(name), err)
	}
	m, err := parseManifest(data, name)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", pool, name, err)
	}
	return &Backup{Manifest: *m, Pool: pool, Path: vol.Path}, nil
}

// MismatchError is a backup whose volume no longer reads as its manifest
// records.
type MismatchError struct {
	Pool, Name string
	Recorded   string
	Read       hostapi.ImageDigest
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("the backup %s/%s reads as %s (%d bytes), but its manifest records %s", e.Pool, e.Name, e.Read, e.Read.Bytes, e.Recorded)
}

// Verify reads the backup's volume back whole and compares its digest with
// the manifest's (a *MismatchError when they differ).
func Verify(ctx context.Context, h Target, b *Backup) error {
	got, err := h.HashVolume(ctx, b.Pool, b.Volume)
	if err != nil {
		return fmt.Errorf("reading %s/%s back: %w", b.Pool, b.Volume, err)
	}
	if got.String() != b.SHA256 || got.Bytes != b.Bytes {
		return &MismatchError{Pool: b.Pool, Name: b.Volume, Recorded: b.SHA256, Read: got}
	}
	return nil
}

// Delete deletes a backup: its manifest first, so that a delete cut off
// midway never leaves a volume that reads as a backup, then its volume.
// What is gone already is no error.
func Delete(ctx context.Context, h Target, pool, name string) error {
	if err := h.RemoveVolume(ctx, pool, ManifestVolume(name)); err != nil {
		return fmt.Errorf("deleting the manifest %s/%s: %w", pool, ManifestVolume(name), err)
	}
	if err := h.RemoveVolume(ctx, pool, name); err != nil {
		return fmt.Errorf("deleting %s/%s: %w", pool, name, err)
	}
	return nil
}

// List names the backups in a pool: the volumes with a manifest beside
// them, sorted. Manifests are not read.
func List(ctx context.Context, h Target, pool string) ([]string, error) {
	names, err := h.ListVolumeNames(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("listing the volumes of pool %s: %w", pool, err)
	}
	return Named(names), nil
}

// Named picks the backups out of a pool's volume names: those whose
// manifest is among them, sorted.
func Named(names []string) []string {
	var out []string
	for _, n := range names {
		if b, ok := IsManifest(n); ok && slices.Contains(names, b) {
			out = append(out, b)
		}
	}
	slices.Sort(out)
	return out
}

func say(progress func(string), line string) {
	if progress != nil {
		progress(line)
	}
}
