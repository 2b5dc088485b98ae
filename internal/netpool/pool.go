package netpool

import (
	"context"
	"errors"
	"fmt"

	"libvirt.org/go/libvirtxml"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
)

// PoolSpec is a directory pool as declared.
type PoolSpec struct {
	Name      string
	Path      string
	Autostart bool
}

// Pool is a storage pool as the host has it.
type Pool struct {
	Name      string
	Type      string // "dir" for the pools Kohaku makes
	Path      string
	Active    bool
	Autostart bool
}

// PoolXML renders the definition of a directory pool.
func PoolXML(s PoolSpec) (string, error) {
	p := libvirtxml.StoragePool{Type: "dir", Name: s.Name, Target: &libvirtxml.StoragePoolTarget{Path: s.Path}}
	doc, err := p.Marshal()
	if err != nil {
		return "", fmt.Errorf("rendering the XML of pool %s: %w", s.Name, err)
	}
	return doc, nil
}

// ParsePool reads a pool's XML and state as the host reported them.
func ParsePool(d hostapi.Definition) (Pool, error) {
	var x libvirtxml.StoragePool
	if err := x.Unmarshal(d.XML); err != nil {
		return Pool{}, fmt.Errorf("parsing the XML of a storage pool: %w", err)
	}
	p := Pool{Name: x.Name, Type: x.Type, Active: d.Active, Autostart: d.Autostart}
	if x.Target != nil {
		p.Path = x.Target.Path
	}
	return p, nil
}

// ReadPool reads the pool name; nil when the host has none.
func ReadPool(ctx context.Context, h PoolHost, name string) (*Pool, error) {
	d, err := h.PoolDefinition(ctx, name)
	if err != nil || d == nil {
		return nil, err
	}
	p, err := ParsePool(*d)
	if err != nil {
		return nil, fmt.Errorf("pool %s: %w", name, err)
	}
	return &p, nil
}

// CreatePool defines a directory pool, builds its directory when missing,
// starts it and sets its autostart. A failure after the definition removes
// the definition again (a directory that was built stays: it may have been
// there before), so the host is left as it was.
func CreatePool(ctx context.Context, h PoolHost, s PoolSpec) (Pool, error) {
	if have, err := h.PoolDefinition(ctx, s.Name); err != nil {
		return Pool{}, err
	} else if have != nil {
		return Pool{}, &ExistsError{Kind: "storage pool", Name: s.Name}
	}
	doc, err := PoolXML(s)
	if err != nil {
		return Pool{}, err
	}
	if err := h.DefinePool(ctx, doc); err != nil {
		return Pool{}, fmt.Errorf("defining pool %s: %w", s.Name, err)
	}
	started := false
	// A build that fails is no failure when the pool starts anyway: some
	// libvirt versions refuse to build over a directory that exists.
	berr := h.BuildPool(ctx, s.Name)
	if err = h.StartPool(ctx, s.Name); err != nil {
		err = fmt.Errorf("starting pool %s: %w", s.Name, err)
		if berr != nil {
			err = errors.Join(fmt.Errorf("building the directory %s of pool %s: %w", s.Path, s.Name, berr), err)
		}
	} else if started = true; s.Autostart {
		if err = h.SetPoolAutostart(ctx, s.Name, true); err != nil {
			err = fmt.Errorf("marking pool %s to start with the host: %w", s.Name, err)
		}
	}
	if err != nil {
		return Pool{}, undoPool(ctx, h, s.Name, started, err)
	}
	p, err := ReadPool(ctx, h, s.Name)
	if err == nil && p == nil {
		err = fmt.Errorf("pool %s was gone right after it was created", s.Name)
	}
	if err != nil {
		return Pool{}, err
	}
	return *p, nil
}

// undoPool removes a pool a failed create defined, and says so with cause.
func undoPool(ctx context.Context, h PoolHost, name string, started bool, cause error) error {
	var uerr error
	if started {
		uerr = h.StopPool(ctx, name)
	}
	if uerr == nil {
		uerr = h.UndefinePool(ctx, name)
	}
	if uerr != nil {
		return fmt.Errorf("%w (and removing the half-made pool failed: %v; remove it with virsh pool-destroy/pool-undefine %s)", cause, uerr, name)
	}
	return fmt.Errorf("%w (the pool's definition was removed again)", cause)
}

// UpdatePool starts a pool found stopped and sets its autostart as
// declared; the path cannot change in place.
func UpdatePool(ctx context.Context, h PoolHost, s PoolSpec) (Pool, error) {
	p, err := ReadPool(ctx, h, s.Name)
	if err != nil {
		return Pool{}, err
	}
	if p == nil {
		return Pool{}, fmt.Errorf("pool %s is gone from the host; refresh, and the next apply creates it again", s.Name)
	}
	if !p.Active {
		if err := h.StartPool(ctx, s.Name); err != nil {
			return Pool{}, fmt.Errorf("starting pool %s: %w", s.Name, err)
		}
	}
	if p.Autostart != s.Autostart {
		if err := h.SetPoolAutostart(ctx, s.Name, s.Autostart); err != nil {
			return Pool{}, fmt.Errorf("setting autostart of pool %s to %t: %w", s.Name, s.Autostart, err)
		}
	}
	p, err = ReadPool(ctx, h, s.Name)
	if err == nil && p == nil {
		err = fmt.Errorf("pool %s was gone right after it was updated", s.Name)
	}
	if err != nil {
		return Pool{}, err
	}
	return *p, nil
}

// PoolRemoval is what DeletePool did beyond removing the pool.
type PoolRemoval struct {
	// DeletedVolumes are the volumes force deleted with the pool.
	DeletedVolumes []string
	// KeptDirectory, when set, says why the pool's directory stayed on the
	// host (something libvirt does not list as a volume was still in it).
	KeptDirectory string
}

// DeletePool removes a pool: refused with a *NotEmptyError while the pool
// holds any volume, unless force, which deletes those volumes first. The
// pool is then stopped, its directory removed (only when empty) and its
// definition undefined. A pool already gone is no error. A pool that is not
// a directory pool (one imported by name) is refused before anything is
// done: removing its target would delete a volume group or a disk's
// partitions.
func DeletePool(ctx context.Context, h PoolHost, name string, force bool) (PoolRemoval, error) {
	var out PoolRemoval
	p, err := ReadPool(ctx, h, name)
	if err != nil || p == nil {
		return out, err
	}
	if !p.Modelled() {
		return out, fmt.Errorf("storage pool %s is of type %s, not a directory pool: kohaku_pool does not remove it "+
			"(its target would go with it); remove it from state with terraform state rm, and with virsh if it must go", name, p.Type)
	}
	if !p.Active { // only a running pool lists its volumes
		if err := h.StartPool(ctx, name); err != nil {
			return out, fmt.Errorf("starting pool %s to see what it holds before removing it: %w", name, err)
		}
	} else if err := h.RefreshPool(ctx, name); err != nil {
		return out, fmt.Errorf("refreshing pool %s to see what it holds before removing it: %w", name, err)
	}
	vols, err := h.ListVolumeNames(ctx, name)
	if err != nil {
		return out, fmt.Errorf("listing the volumes of pool %s: %w", name, err)
	}
	if len(vols) > 0 && !force {
		return out, &NotEmptyError{Pool: name, Volumes: vols}
	}
	for _, v := range vols {
		if err := h.RemoveVolume(ctx, name, v); err != nil {
			return out, fmt.Errorf("deleting volume %s/%s (force_destroy): %w", name, v, err)
		}
		out.DeletedVolumes = append(out.DeletedVolumes, v)
	}
	if err := h.StopPool(ctx, name); err != nil {
		return out, fmt.Errorf("stopping pool %s: %w", name, err)
	}
	if err := h.DeletePoolTarget(ctx, name); err != nil {
		out.KeptDirectory = fmt.Sprintf("the directory %s of pool %s was kept: %v", p.Path, name, err)
	}
	if err := h.UndefinePool(ctx, name); err != nil {
		return out, fmt.Errorf("undefining pool %s: %w", name, err)
	}
	return out, nil
}
