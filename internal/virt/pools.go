package virt

import (
	"context"
	"fmt"
	"sort"

	"github.com/digitalocean/go-libvirt"
)

// PoolDefinition reads a storage pool; nil when the host has no pool of
// that name.
func (c *Client) PoolDefinition(ctx context.Context, name string) (*Definition, error) {
	var out *Definition
	err := c.Call(ctx, "read storage pool "+name, func(l *libvirt.Libvirt) error {
		p, err := l.StoragePoolLookupByName(name)
		if notFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		doc, err := l.StoragePoolGetXMLDesc(p, 0)
		if err != nil {
			return err
		}
		active, err := l.StoragePoolIsActive(p)
		if err != nil {
			return err
		}
		auto, err := l.StoragePoolGetAutostart(p)
		if err != nil {
			return err
		}
		out = &Definition{XML: doc, Active: active == 1, Autostart: auto == 1}
		return nil
	})
	return out, err
}

// DefinePool makes a storage pool persistent from its XML (virsh
// pool-define); it is neither built nor started.
func (c *Client) DefinePool(ctx context.Context, doc string) error {
	return c.Call(ctx, "define storage pool", func(l *libvirt.Libvirt) error {
		_, err := l.StoragePoolDefineXML(doc, 0)
		return err
	})
}

// BuildPool makes a pool's target on the host (virsh pool-build): for a
// directory pool, the directory when it is missing.
func (c *Client) BuildPool(ctx context.Context, name string) error {
	return c.poolCall(ctx, "build storage pool "+name, name, func(l *libvirt.Libvirt, p libvirt.StoragePool) error {
		return l.StoragePoolBuild(p, 0)
	})
}

// StartPool starts a defined pool (virsh pool-start).
func (c *Client) StartPool(ctx context.Context, name string) error {
	return c.poolCall(ctx, "start storage pool "+name, name, func(l *libvirt.Libvirt, p libvirt.StoragePool) error {
		return l.StoragePoolCreate(p, 0)
	})
}

// SetPoolAutostart sets whether a pool starts with the host (virsh
// pool-autostart).
func (c *Client) SetPoolAutostart(ctx context.Context, name string, on bool) error {
	return c.poolCall(ctx, fmt.Sprintf("set autostart of storage pool %s to %t", name, on), name, func(l *libvirt.Libvirt, p libvirt.StoragePool) error {
		return l.StoragePoolSetAutostart(p, boolInt(on))
	})
}

// RefreshPool rescans a running pool's target, so files put there behind
// libvirt's back show as volumes (virsh pool-refresh).
func (c *Client) RefreshPool(ctx context.Context, name string) error {
	return c.poolCall(ctx, "refresh storage pool "+name, name, func(l *libvirt.Libvirt, p libvirt.StoragePool) error {
		return l.StoragePoolRefresh(p, 0)
	})
}

// StopPool stops a running pool (virsh pool-destroy); its volumes stay.
func (c *Client) StopPool(ctx context.Context, name string) error {
	return c.poolCall(ctx, "stop storage pool "+name, name, func(l *libvirt.Libvirt, p libvirt.StoragePool) error {
		return l.StoragePoolDestroy(p)
	})
}

// DeletePoolTarget removes a stopped pool's target from the host (virsh
// pool-delete): for a directory pool, the directory, which must be empty.
func (c *Client) DeletePoolTarget(ctx context.Context, name string) error {
	return c.poolCall(ctx, "delete the target of storage pool "+name, name, func(l *libvirt.Libvirt, p libvirt.StoragePool) error {
		return l.StoragePoolDelete(p, libvirt.StoragePoolDeleteNormal)
	})
}

// UndefinePool removes a stopped pool's definition (virsh pool-undefine).
func (c *Client) UndefinePool(ctx context.Context, name string) error {
	return c.poolCall(ctx, "undefine storage pool "+name, name, func(l *libvirt.Libvirt, p libvirt.StoragePool) error {
		return l.StoragePoolUndefine(p)
	})
}

// poolCall looks the pool up and runs fn on it; a missing pool is an error
// wrapping ErrPoolNotFound.
func (c *Client) poolCall(ctx context.Context, op, name string, fn func(*libvirt.Libvirt, libvirt.StoragePool) error) error {
	return c.Call(ctx, op, func(l *libvirt.Libvirt) error {
		p, err := l.StoragePoolLookupByName(name)
		if err == nil {
			err = fn(l, p)
		}
		if notFound(err) {
			return fmt.Errorf("%w: %s", ErrPoolNotFound, name)
		}
		return err
	})
}

func boolInt(on bool) int32 {
	if on {
		return 1
	}
	return 0
}

// PoolNames returns the names of every storage pool of the host, started or
// not, sorted.
func (c *Client) PoolNames(ctx context.Context) ([]string, error) {
	var names []string
	err := c.Call(ctx, "list storage pools", func(l *libvirt.Libvirt) error {
		pools, _, err := l.ConnectListAllStoragePools(1, libvirt.ConnectListStoragePoolsActive|libvirt.ConnectListStoragePoolsInactive)
		if err != nil {
			return err
		}
		for _, p := range pools {
			names = append(names, p.Name)
		}
		return nil
	})
	sort.Strings(names)
	return names, err
}
