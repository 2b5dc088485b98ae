package virt

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostconn"
)

// BackupTarget is one disk of a running domain to copy, and the new qcow2
// volume to copy it into.
type BackupTarget = hostapi.BackupTarget

// FreezeFilesystems asks the guest agent to freeze the guest's file
// systems (guest-fsfreeze-freeze) and returns how many it froze. Every
// freeze must be followed by ThawFilesystems.
func (c *Client) FreezeFilesystems(ctx context.Context, ref DomainRef) (int, error) {
	var n int32
	err := c.Call(ctx, "freeze the file systems of "+ref.Name+" through the guest agent", func(l *libvirt.Libvirt) error {
		d, err := domainOf(l, ref)
		if err != nil {
			return err
		}
		n, err = l.DomainFsfreeze(d, nil, 0)
		return err
	})
	return int(n), err
}

// ThawFilesystems thaws what FreezeFilesystems froze.
func (c *Client) ThawFilesystems(ctx context.Context, ref DomainRef) error {
	return c.Call(ctx, "thaw the file systems of "+ref.Name+" through the guest agent", func(l *libvirt.Libvirt) error {
		d, err := domainOf(l, ref)
		if err != nil {
			return err
		}
		_, err = l.DomainFsthaw(d, nil, 0)
		return err
	})
}

func domainOf(l *libvirt.Libvirt, ref DomainRef) (libvirt.Domain, error) {
	if u, err := ParseUUID(ref.UUID); err == nil {
		return l.DomainLookupByUUID(u)
	}
	return l.DomainLookupByName(ref.Name)
}

// BeginBackup starts libvirt's push-mode backup of a running domain: each
// target's disk is copied, as it is at this moment, into a new qcow2 file in
// the target pool's directory (a standalone copy, its backing chain merged
// in), while the guest runs on. It returns once the backup job has begun:
// WaitBackup follows it to its end. A target volume that exists already is
// never touched (a *VolumeExistsError). A host whose libvirt or QEMU has no
// backup support fails with an error Unsupported recognises.
func (c *Client) BeginBackup(ctx context.Context, ref DomainRef, targets []BackupTarget) error {
	return c.Call(ctx, "begin the backup of "+ref.Name, func(l *libvirt.Libvirt) error {
		d, err := domainOf(l, ref)
		if err != nil {
			return err
		}
		devs, err := diskTargets(l, d)
		if err != nil {
			return err
		}
		push := &libvirtxml.DomainBackupPushDisks{}
		for _, t := range targets {
			dev := devs["volume "+t.SourcePool+"/"+t.SourceVolume]
			if dev == "" {
				sp, err := poolByName(l, t.SourcePool)
				if err != nil {
					return err
				}
				sv, err := lookupVolume(l, sp, t.SourceVolume)
				if err != nil {
					return err
				}
				path, err := l.StorageVolGetPath(sv)
				if err != nil {
					return err
				}
				if dev = devs["file "+path]; dev == "" {
					return fmt.Errorf("%s has no disk on the volume %s/%s", ref.Name, t.SourcePool, t.SourceVolume)
				}
			}
			p, err := poolByName(l, t.Pool)
			if err != nil {
				return err
			}
			if err := volumeNameFree(l, p, t.Pool, t.Name); err != nil {
				return err
			}
			dir, err := poolDir(l, p)
			if err != nil {
				return err
			}
			push.Disks = append(push.Disks, libvirtxml.DomainBackupPushDisk{
				Name: dev, Backup: "yes",
				Driver: &libvirtxml.DomainBackupDiskDriver{Type: "qcow2"},
				Target: &libvirtxml.DomainDiskSource{File: &libvirtxml.DomainDiskSourceFile{File: filepath.Join(dir, t.Name)}},
			})
		}
		doc, err := (&libvirtxml.DomainBackup{Push: &libvirtxml.DomainBackupPush{Disks: push}}).Marshal()
		if err != nil {
			return err
		}
		return l.DomainBackupBegin(d, doc, nil, 0)
	})
}

// diskTargets maps the running domain's disks, by "volume <pool>/<name>"
// and by "file <path>", to their target devices, which a backup names.
func diskTargets(l *libvirt.Libvirt, d libvirt.Domain) (map[string]string, error) {
	doc, err := l.DomainGetXMLDesc(d, 0)
	if err != nil {
		return nil, err
	}
	var x libvirtxml.Domain
	if err := x.Unmarshal(doc); err != nil {
		return nil, err
	}
	out := map[string]string{}
	if x.Devices == nil {
		return out, nil
	}
	for _, disk := range x.Devices.Disks {
		if disk.Target == nil || disk.Source == nil {
			continue
		}
		if v := disk.Source.Volume; v != nil {
			out["volume "+v.Pool+"/"+v.Volume] = disk.Target.Dev
		}
		if f := disk.Source.File; f != nil {
			out["file "+f.File] = disk.Target.Dev
		}
	}
	return out, nil
}

// poolDir is the directory of a directory-backed pool.
func poolDir(l *libvirt.Libvirt, p libvirt.StoragePool) (string, error) {
	doc, err := l.StoragePoolGetXMLDesc(p, 0)
	if err != nil {
		return "", err
	}
	var x libvirtxml.StoragePool
	if err := x.Unmarshal(doc); err != nil {
		return "", err
	}
	if x.Type != "dir" || x.Target == nil || x.Target.Path == "" {
		return "", fmt.Errorf("pool %s is a %s pool; a running VM's disks are copied into directory pools only", p.Name, x.Type)
	}
	return x.Target.Path, nil
}

// BackupPoll is how often WaitBackup reads the backup job's progress.
var BackupPoll = 500 * time.Millisecond

// WaitBackup follows the backup job BeginBackup began until it ends, then
// makes its targets volumes of their pools (a pool refresh) and describes
// them. progress, when set, receives the bytes copied and to copy. When
// ctx ends first, or the job fails, the job is aborted and the targets'
// files deleted.
func (c *Client) WaitBackup(ctx context.Context, ref DomainRef, targets []BackupTarget, progress func(done, total uint64)) ([]*VolumeDetail, error) {
	fail := func(err error) ([]*VolumeDetail, error) {
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), hostconn.Unreachable+c.settings.CallTimeout)
		defer cancel()
		_ = c.Call(cctx, "abort the backup of "+ref.Name, func(l *libvirt.Libvirt) error {
			d, err := domainOf(l, ref)
			if err != nil {
				return err
			}
			return l.DomainAbortJob(d)
		})
		var errs []error
		for _, t := range targets {
			if derr := c.dropBackupTarget(cctx, t); derr != nil {
				errs = append(errs, derr)
			}
		}
		if derr := errors.Join(errs...); derr != nil {
			return nil, fmt.Errorf("%w (deleting the partial copies failed: %v)", err, derr)
		}
		return nil, fmt.Errorf("%w (the backup was aborted and its partial copies deleted)", err)
	}
	for {
		var typ int32
		var total, done uint64
		err := c.Call(ctx, "read the backup job of "+ref.Name, func(l *libvirt.Libvirt) error {
			d, err := domainOf(l, ref)
			if err != nil {
				return err
			}
			typ, _, _, total, done, _, _, _, _, _, _, _, err = l.DomainGetJobInfo(d)
			return err
		})
		if err != nil {
			return fail(err)
		}
		if typ == int32(libvirt.DomainJobNone) {
			break
		}
		if progress != nil {
			progress(done, total)
		}
		select {
		case <-ctx.Done():
			return fail(fmt.Errorf("the backup of %s was interrupted: %w", ref.Name, ctx.Err()))
		case <-time.After(BackupPoll):
		}
	}
	var result int32
	var msg string
	err := c.Call(ctx, "read the backup's result for "+ref.Name, func(l *libvirt.Libvirt) error {
		d, err := domainOf(l, ref)
		if err != nil {
			return err
		}
		var params []libvirt.TypedParam
		result, params, err = l.DomainGetJobStats(d, libvirt.DomainJobStatsCompleted)
		for _, p := range params {
			if s, ok := p.Value.I.(string); ok && p.Field == "errmsg" {
				msg = s
			}
		}
		return err
	})
	if err != nil {
		return fail(err)
	}
	if result != int32(libvirt.DomainJobCompleted) {
		return fail(fmt.Errorf("the backup of %s did not complete (job type %d): %s", ref.Name, result, msg))
	}
	out := make([]*VolumeDetail, 0, len(targets))
	err = c.Call(ctx, "read the backup's copies of "+ref.Name, func(l *libvirt.Libvirt) error {
		out = out[:0]
		for _, t := range targets {
			p, err := poolByName(l, t.Pool)
			if err != nil {
				return err
			}
			_ = l.StoragePoolRefresh(p, 0)
			v, err := lookupVolume(l, p, t.Name)
			if err != nil {
				return err
			}
			det, err := volumeDetail(l, t.Pool, v)
			if err != nil {
				return err
			}
			out = append(out, det)
		}
		return nil
	})
	if err != nil {
		return fail(err)
	}
	return out, nil
}

// dropBackupTarget deletes a backup target's file, through the pool once
// a refresh shows it as a volume.
func (c *Client) dropBackupTarget(ctx context.Context, t BackupTarget) error {
	return c.Call(ctx, fmt.Sprintf("delete the partial copy %s/%s", t.Pool, t.Name), func(l *libvirt.Libvirt) error {
		p, err := poolByName(l, t.Pool)
		if err != nil {
			return err
		}
		_ = l.StoragePoolRefresh(p, 0)
		v, err := l.StorageVolLookupByName(p, t.Name)
		if notFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := l.StorageVolDelete(v, 0); err != nil && !notFound(err) {
			return err
		}
		return nil
	})
}
