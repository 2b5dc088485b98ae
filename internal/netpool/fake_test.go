package netpool

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"libvirt.org/go/libvirtxml"

	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// fakeHost is a libvirt host's pools and networks in memory. It keeps a
// log of calls, so tests can tell what was done (a network restarted, a
// volume deleted) and not only what is there after.
type fakeHost struct {
	pools    map[string]*fakeObj
	volumes  map[string][]string // pool -> volume names
	dirs     map[string]bool     // pool paths that exist
	networks map[string]*fakeObj
	calls    []string
	failOn   string // a call name that fails
}

type fakeObj struct {
	xml               string
	active, autostart bool
}

func newFakeHost() *fakeHost {
	return &fakeHost{pools: map[string]*fakeObj{}, volumes: map[string][]string{}, dirs: map[string]bool{}, networks: map[string]*fakeObj{}}
}

var (
	_ PoolLister    = (*fakeHost)(nil)
	_ NetworkLister = (*fakeHost)(nil)
)

var errFake = errors.New("injected failure")

func (f *fakeHost) call(op, name string) error {
	f.calls = append(f.calls, op+" "+name)
	if f.failOn == op {
		return fmt.Errorf("%s %s: %w", op, name, errFake)
	}
	return nil
}

func (f *fakeHost) def(m map[string]*fakeObj, name string) (*virt.Definition, error) {
	o := m[name]
	if o == nil {
		return nil, nil
	}
	return &virt.Definition{XML: o.xml, Active: o.active, Autostart: o.autostart}, nil
}

func (f *fakeHost) get(m map[string]*fakeObj, name string) (*fakeObj, error) {
	if o := m[name]; o != nil {
		return o, nil
	}
	return nil, fmt.Errorf("%s: %w", name, virt.ErrNotFound)
}

func (f *fakeHost) PoolDefinition(_ context.Context, name string) (*virt.Definition, error) {
	return f.def(f.pools, name)
}

func (f *fakeHost) DefinePool(_ context.Context, doc string) error {
	var x libvirtxml.StoragePool
	if err := x.Unmarshal(doc); err != nil {
		return err
	}
	if err := f.call("DefinePool", x.Name); err != nil {
		return err
	}
	f.pools[x.Name] = &fakeObj{xml: doc}
	return nil
}

func (f *fakeHost) poolOp(op, name string, fn func(*fakeObj) error) error {
	if err := f.call(op, name); err != nil {
		return err
	}
	o, err := f.get(f.pools, name)
	if err != nil {
		return err
	}
	return fn(o)
}

func poolPath(o *fakeObj) string {
	var x libvirtxml.StoragePool
	_ = x.Unmarshal(o.xml)
	return x.Target.Path
}

func (f *fakeHost) BuildPool(_ context.Context, name string) error {
	return f.poolOp("BuildPool", name, func(o *fakeObj) error { f.dirs[poolPath(o)] = true; return nil })
}

func (f *fakeHost) StartPool(_ context.Context, name string) error {
	return f.poolOp("StartPool", name, func(o *fakeObj) error {
		if !f.dirs[poolPath(o)] {
			return fmt.Errorf("cannot open directory %s", poolPath(o))
		}
		o.active = true
		return nil
	})
}

func (f *fakeHost) SetPoolAutostart(_ context.Context, name string, on bool) error {
	return f.poolOp("SetPoolAutostart", name, func(o *fakeObj) error { o.autostart = on; return nil })
}

func (f *fakeHost) RefreshPool(_ context.Context, name string) error {
	return f.poolOp("RefreshPool", name, func(o *fakeObj) error {
		if !o.active {
			return errors.New("pool is not active")
		}
		return nil
	})
}

func (f *fakeHost) StopPool(_ context.Context, name string) error {
	return f.poolOp("StopPool", name, func(o *fakeObj) error { o.active = false; return nil })
}

func (f *fakeHost) DeletePoolTarget(_ context.Context, name string) error {
	return f.poolOp("DeletePoolTarget", name, func(o *fakeObj) error {
		if o.active {
			return errors.New("pool is still active")
		}
		if len(f.volumes[name]) > 0 {
			return errors.New("directory not empty")
		}
		delete(f.dirs, poolPath(o))
		return nil
	})
}

func (f *fakeHost) UndefinePool(_ context.Context, name string) error {
	return f.poolOp("UndefinePool", name, func(o *fakeObj) error {
		if o.active {
			return errors.New("pool is still active")
		}
		delete(f.pools, name)
		return nil
	})
}

func (f *fakeHost) ListVolumeNames(_ context.Context, pool string) ([]string, error) {
	o, err := f.get(f.pools, pool)
	if err != nil {
		return nil, err
	}
	if !o.active {
		return nil, errors.New("pool is not active")
	}
	return slices.Sorted(slices.Values(f.volumes[pool])), nil
}

func (f *fakeHost) RemoveVolume(_ context.Context, pool, name string) error {
	if err := f.call("RemoveVolume", pool+"/"+name); err != nil {
		return err
	}
	f.volumes[pool] = slices.DeleteFunc(f.volumes[pool], func(v string) bool { return v == name })
	return nil
}

func (f *fakeHost) NetworkDefinition(_ context.Context, name string) (*virt.Definition, error) {
	return f.def(f.networks, name)
}

func (f *fakeHost) DefineNetwork(_ context.Context, doc string) error {
	var x libvirtxml.Network
	if err := x.Unmarshal(doc); err != nil {
		return err
	}
	if err := f.call("DefineNetwork", x.Name); err != nil {
		return err
	}
	if x.Bridge == nil {
		x.Bridge = &libvirtxml.NetworkBridge{Name: "virbr7"} // libvirt picks one
	}
	out, err := x.Marshal()
	if err != nil {
		return err
	}
	f.networks[x.Name] = &fakeObj{xml: out}
	return nil
}

func (f *fakeHost) netOp(op, name string, fn func(*fakeObj) error) error {
	if err := f.call(op, name); err != nil {
		return err
	}
	o, err := f.get(f.networks, name)
	if err != nil {
		return err
	}
	return fn(o)
}

func (f *fakeHost) StartNetwork(_ context.Context, name string) error {
	return f.netOp("StartNetwork", name, func(o *fakeObj) error {
		if o.active {
			return errors.New("network is already active")
		}
		o.active = true
		return nil
	})
}

func (f *fakeHost) SetNetworkAutostart(_ context.Context, name string, on bool) error {
	return f.netOp("SetNetworkAutostart", name, func(o *fakeObj) error { o.autostart = on; return nil })
}

func (f *fakeHost) StopNetwork(_ context.Context, name string) error {
	return f.netOp("StopNetwork", name, func(o *fakeObj) error { o.active = false; return nil })
}

func (f *fakeHost) UndefineNetwork(_ context.Context, name string) error {
	return f.netOp("UndefineNetwork", name, func(o *fakeObj) error {
		if o.active {
			return errors.New("network is still active")
		}
		delete(f.networks, name)
		return nil
	})
}

// UpdateNetworkDHCPHost does what libvirt does: add-last refuses a MAC or
// address already reserved, delete refuses one that is not there, and live
// is refused on a stopped network.
func (f *fakeHost) UpdateNetworkDHCPHost(_ context.Context, name string, add bool, hostXML string, live bool) error {
	op := "DeleteDHCPHost"
	if add {
		op = "AddDHCPHost"
	}
	return f.netOp(op, name, func(o *fakeObj) error {
		if live != o.active {
			return fmt.Errorf("live=%t on a network whose active=%t", live, o.active)
		}
		var h libvirtxml.NetworkDHCPHost
		if err := h.Unmarshal(hostXML); err != nil {
			return err
		}
		var x libvirtxml.Network
		if err := x.Unmarshal(o.xml); err != nil {
			return err
		}
		if len(x.IPs) == 0 || x.IPs[0].DHCP == nil {
			return errors.New("network has no DHCP")
		}
		d := x.IPs[0].DHCP
		i := slices.IndexFunc(d.Hosts, func(c libvirtxml.NetworkDHCPHost) bool {
			return strings.EqualFold(c.MAC, h.MAC) || c.IP == h.IP
		})
		switch {
		case add && i >= 0:
			return fmt.Errorf("there is an existing dhcp host entry in network '%s' that matches", name)
		case add:
			d.Hosts = append(d.Hosts, h)
		case i < 0 || d.Hosts[i].IP != h.IP || !strings.EqualFold(d.Hosts[i].MAC, h.MAC):
			return fmt.Errorf("couldn't locate a matching dhcp host entry in network '%s'", name)
		default:
			d.Hosts = slices.Delete(d.Hosts, i, i+1)
		}
		doc, err := x.Marshal()
		o.xml = doc
		return err
	})
}

func (f *fakeHost) PoolNames(_ context.Context) ([]string, error) {
	if err := f.call("PoolNames", ""); err != nil {
		return nil, err
	}
	return slices.Collect(maps.Keys(f.pools)), nil
}

func (f *fakeHost) NetworkNames(_ context.Context) ([]string, error) {
	if err := f.call("NetworkNames", ""); err != nil {
		return nil, err
	}
	return slices.Collect(maps.Keys(f.networks)), nil
}
