// Package libvirthost wires internal/virt's libvirt connections into the
// provider: main hands Connect to provider.New, so that the Terraform layer
// and the lifecycle packages below it build without importing libvirt. It
// also holds the compile-time proof that *virt.Client is every host the
// packages below the provider declare they need.
package libvirthost

import (
	"github.com/kohaku/terraform-provider-kohaku/internal/backup"
	"github.com/kohaku/terraform-provider-kohaku/internal/capacity"
	"github.com/kohaku/terraform-provider-kohaku/internal/capture"
	"github.com/kohaku/terraform-provider-kohaku/internal/gpubind"
	"github.com/kohaku/terraform-provider-kohaku/internal/hosts"
	"github.com/kohaku/terraform-provider-kohaku/internal/imagelife"
	"github.com/kohaku/terraform-provider-kohaku/internal/mdev"
	"github.com/kohaku/terraform-provider-kohaku/internal/netpool"
	"github.com/kohaku/terraform-provider-kohaku/internal/ready"
	"github.com/kohaku/terraform-provider-kohaku/internal/seedlife"
	"github.com/kohaku/terraform-provider-kohaku/internal/snapshot"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

// Connect makes a libvirt connection from one host's settings, validating
// them without dialing: the connection dials on first use.
func Connect(s hosts.Settings) (hosts.Conn, error) {
	c, err := virt.New(s)
	if err != nil {
		return nil, err
	}
	return c, nil
}

var _ hosts.Connect = Connect

// *virt.Client is each host interface the packages below the provider
// declare where they use it; a method changed on either side fails the
// build here.
var (
	_ hosts.Conn = (*virt.Client)(nil)

	_ vmlife.Host       = (*virt.Client)(nil)
	_ vmlife.MoveHost   = (*virt.Client)(nil)
	_ vmlife.PowerHost  = (*virt.Client)(nil)
	_ vmlife.GuestAgent = (*virt.Client)(nil)

	_ gpubind.Host      = (*virt.Client)(nil)
	_ gpubind.Machine   = (*virt.Client)(nil)
	_ gpubind.HostShell = (*virt.Client)(nil)
	_ gpubind.ResetHost = (*virt.Client)(nil)

	_ mdev.Host     = (*virt.Client)(nil)
	_ seedlife.Host = (*virt.Client)(nil)

	_ imagelife.Host       = (*virt.Client)(nil)
	_ imagelife.CopySource = (*virt.Client)(nil)
	_ imagelife.CopyTarget = (*virt.Client)(nil)

	_ capture.Host  = (*virt.Client)(nil)
	_ snapshot.Host = (*virt.Client)(nil)
	_ backup.Source = (*virt.Client)(nil)
	_ backup.Target = (*virt.Client)(nil)
	_ ready.Agent   = (*virt.Client)(nil)
	_ capacity.Host = (*virt.Client)(nil)
	_ capacity.Conn = (*virt.Client)(nil)

	_ netpool.PoolHost      = (*virt.Client)(nil)
	_ netpool.NetworkHost   = (*virt.Client)(nil)
	_ netpool.PoolLister    = (*virt.Client)(nil)
	_ netpool.NetworkLister = (*virt.Client)(nil)
)
