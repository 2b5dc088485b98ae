package virt

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"github.com/digitalocean/go-libvirt"
	"libvirt.org/go/libvirtxml"
)

// HostInfo reads versions, capabilities, NUMA cells, pools and networks from
// the host. It makes a fixed number of calls (versions, node info and the
// capabilities; one free-memory call; one free-pages call per run of
// consecutive NUMA cell ids, which is one on usual hosts) plus one per pool
// and one per network.
func (c *Client) HostInfo(ctx context.Context) (*HostInfo, error) {
	h := &HostInfo{}
	var capsXML string
	err := c.Call(ctx, "read host versions and capabilities", func(l *libvirt.Libvirt) error {
		lib, err := l.ConnectGetLibVersion()
		if err != nil {
			return err
		}
		h.LibvirtVersion = versionString(lib)
		hv, err := l.ConnectGetVersion()
		if err != nil {
			return err
		}
		h.HypervisorVersion = versionString(hv)
		if h.HypervisorType, err = l.ConnectGetType(); err != nil {
			return err
		}
		if h.Hostname, err = l.ConnectGetHostname(); err != nil {
			return err
		}
		model, mem, cpus, _, _, _, _, _, err := l.NodeGetInfo()
		if err != nil {
			return err
		}
		h.CPUModel = cString(model[:])
		h.MemoryMiB = int64(mem / 1024) // libvirt reports KiB
		h.CPUs = int64(cpus)
		capsXML, err = l.ConnectGetCapabilities()
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := capabilitiesInto(h, capsXML); err != nil {
		return nil, err
	}
	if err := c.numaFree(ctx, h.NUMANodes); err != nil {
		return nil, err
	}
	if h.Pools, err = c.pools(ctx); err != nil {
		return nil, err
	}
	if h.Networks, err = c.networks(ctx); err != nil {
		return nil, err
	}
	return h, nil
}

func capabilitiesInto(h *HostInfo, doc string) error {
	var caps libvirtxml.Caps
	if err := caps.Unmarshal(doc); err != nil {
		return fmt.Errorf("parsing host capabilities: %w", err)
	}
	h.UUID = caps.Host.UUID
	if caps.Host.CPU != nil {
		h.Arch = caps.Host.CPU.Arch
	}
	seen := map[string]bool{}
	for _, g := range caps.Guests {
		if g.OSType != "hvm" || g.Arch.Name != h.Arch {
			continue
		}
		for _, d := range g.Arch.Domains {
			if !seen[d.Type] {
				seen[d.Type] = true
				h.DomainTypes = append(h.DomainTypes, d.Type)
			}
		}
	}
	sort.Strings(h.DomainTypes)
	var err error
	h.NUMANodes, err = numaFromCapabilities(&caps)
	return err
}

func (c *Client) pools(ctx context.Context) ([]PoolInfo, error) {
	var out []PoolInfo
	err := c.Call(ctx, "list storage pools", func(l *libvirt.Libvirt) error {
		all, _, err := l.ConnectListAllStoragePools(1, 0)
		if err != nil {
			return err
		}
		active, _, err := l.ConnectListAllStoragePools(1, libvirt.ConnectListStoragePoolsActive)
		if err != nil {
			return err
		}
		isActive := map[string]bool{}
		for _, p := range active {
			isActive[p.Name] = true
		}
		for _, p := range all {
			doc, err := l.StoragePoolGetXMLDesc(p, 0)
			if err != nil {
				if notFound(err) {
					continue // removed while we listed
				}
				return err
			}
			var x libvirtxml.StoragePool
			if err := x.Unmarshal(doc); err != nil {
				return fmt.Errorf("parsing pool %s: %w", p.Name, err)
			}
			info := PoolInfo{Name: p.Name, Type: x.Type, Active: isActive[p.Name]}
			if x.Target != nil {
				info.Path = x.Target.Path
			}
			info.CapacityBytes = sizeBytes(x.Capacity)
			info.AllocationBytes = sizeBytes(x.Allocation)
			info.AvailableBytes = sizeBytes(x.Available)
			out = append(out, info)
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, err
}

func (c *Client) networks(ctx context.Context) ([]NetworkInfo, error) {
	var out []NetworkInfo
	err := c.Call(ctx, "list networks", func(l *libvirt.Libvirt) error {
		all, _, err := l.ConnectListAllNetworks(1, 0)
		if err != nil {
			return err
		}
		active, _, err := l.ConnectListAllNetworks(1, libvirt.ConnectListNetworksActive)
		if err != nil {
			return err
		}
		isActive := map[string]bool{}
		for _, n := range active {
			isActive[n.Name] = true
		}
		for _, n := range all {
			doc, err := l.NetworkGetXMLDesc(n, 0)
			if err != nil {
				if notFound(err) {
					continue
				}
				return err
			}
			var x libvirtxml.Network
			if err := x.Unmarshal(doc); err != nil {
				return fmt.Errorf("parsing network %s: %w", n.Name, err)
			}
			info := NetworkInfo{Name: n.Name, Active: isActive[n.Name]}
			if x.Bridge != nil {
				info.Bridge = x.Bridge.Name
			}
			if x.Forward != nil {
				info.Forward = x.Forward.Mode
			}
			out = append(out, info)
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, err
}

// versionString turns libvirt's major*1e6+minor*1e3+release into "9.0.0".
func versionString(v uint64) string {
	return fmt.Sprintf("%d.%d.%d", v/1000000, (v/1000)%1000, v%1000)
}

func cString(b []int8) string {
	var sb strings.Builder
	for _, c := range b {
		if c == 0 {
			break
		}
		sb.WriteByte(byte(c))
	}
	return sb.String()
}

func sizeBytes(s *libvirtxml.StoragePoolSize) int64 {
	if s == nil {
		return 0
	}
	return int64(s.Value * unitBytes(s.Unit))
}
