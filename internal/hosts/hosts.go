package hosts

import (
	"context"
	"errors"

	"github.com/kohaku/terraform-provider-kohaku/internal/capacity"
	"github.com/kohaku/terraform-provider-kohaku/internal/capture"
	"github.com/kohaku/terraform-provider-kohaku/internal/gpubind"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostconn"
	"github.com/kohaku/terraform-provider-kohaku/internal/imagelife"
	"github.com/kohaku/terraform-provider-kohaku/internal/mdev"
	"github.com/kohaku/terraform-provider-kohaku/internal/netpool"
	"github.com/kohaku/terraform-provider-kohaku/internal/ready"
	"github.com/kohaku/terraform-provider-kohaku/internal/seedlife"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

// Settings is the connection settings of one host, as the provider's
// configuration gives them: virt's own type, which the connection reads as
// it is. SSHSettings and TLSSettings are its transports' parts.
type Settings = virt.Settings

// SSHSettings is the SSH part of a host's Settings.
type SSHSettings = virt.SSHSettings

// TLSSettings is the TLS part of a host's Settings.
type TLSSettings = virt.TLSSettings

// What a host operation reads and takes. The lifecycle packages' host
// interfaces speak these types; the provider converts them to its models.
type (
	// DomainRef names a domain by UUID and name.
	DomainRef = virt.DomainRef
	// DomainStatus is a domain as read: its XML and its state.
	DomainStatus = virt.DomainStatus
	// DomainSummary is a domain as listed.
	DomainSummary = virt.DomainSummary
	// VolumeHead is a volume as listed.
	VolumeHead = virt.VolumeHead
	// VolumeDetail is a volume as read.
	VolumeDetail = virt.VolumeDetail
	// ImageUpload is an image to stream into a pool.
	ImageUpload = virt.ImageUpload
	// NUMANode is one of the host's NUMA nodes.
	NUMANode = virt.NUMANode
)

// The values of an SSH connection's known_hosts policy.
const (
	HostKeyNormal = virt.HostKeyNormal
	HostKeyAuto   = virt.HostKeyAuto
	HostKeyIgnore = virt.HostKeyIgnore
)

// Errors a host operation can be matched against with errors.Is.
var (
	ErrNotFound             = virt.ErrNotFound
	ErrDomainNotFound       = virt.ErrDomainNotFound
	ErrHostFilesUnsupported = virt.ErrHostFilesUnsupported
)

// Fleet holds the default host and the named hosts of the provider's hosts
// map. A host is dialed on first use, so one that is down fails only the
// resources placed on it.
type Fleet struct {
	f *virt.Fleet
}

// NewFleet validates every host's settings without dialing any of them.
func NewFleet(def Settings, named map[string]Settings) (*Fleet, error) {
	f, err := virt.NewFleet(def, named)
	if err != nil {
		return nil, err
	}
	return &Fleet{f: f}, nil
}

// Host returns a key of the hosts map; "" is the default host.
func (f *Fleet) Host(name string) (Host, error) {
	c, err := f.f.Host(name)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// Default is the host a resource without a host argument works on.
func (f *Fleet) Default() Host { return f.f.Default() }

// Names lists the keys of the hosts map, sorted.
func (f *Fleet) Names() []string { return f.f.Names() }

// Close drops every connection the fleet has dialed.
func (f *Fleet) Close() { f.f.Close() }

// Host is one libvirt host as the provider sees it: what the lifecycle
// and reading packages below declare they need of a host, and the few
// listings the provider's list resources and data sources read. Nothing
// else of the connection is in reach of the Terraform layer: a method
// added here is a decision, not an accident. *virt.Client is one.
type Host interface {
	vmlife.Host
	vmlife.MoveHost
	vmlife.PowerHost
	vmlife.GuestAgent
	gpubind.Machine
	gpubind.ResetHost
	mdev.Host
	seedlife.Host
	imagelife.Host
	imagelife.CopySource
	imagelife.CopyTarget
	capture.Host
	ready.Agent
	capacity.Conn
	netpool.PoolHost
	netpool.NetworkHost
	netpool.PoolLister
	netpool.NetworkLister

	// Listings for the list resources and the host data source.
	HostInfo(ctx context.Context) (*virt.HostInfo, error)
	ListDomains(ctx context.Context) ([]virt.DomainSummary, error)
	ActivePoolNames(ctx context.Context) ([]string, error)
	VolumeHeads(ctx context.Context, pool, prefix string, n int64) ([]virt.VolumeHead, error)
	VolumeExists(ctx context.Context, pool, name string) (bool, error)
	WritableDisks(ctx context.Context) ([]virt.DiskUse, error)
}

var _ Host = (*virt.Client)(nil)

// Local reports whether h is reached over libvirt's local socket.
func Local(h Host) bool { return h.Endpoint().Transport == virt.TransportUnix }

// Unreachable reports, for an error from a host operation, the redacted
// address of the host that could not be reached; ok is false when the error
// is not about reaching the host.
func Unreachable(err error) (host string, ok bool) {
	var conn *virt.ConnectionError
	if errors.As(err, &conn) {
		return conn.Endpoint.Redacted(), true
	}
	return "", false
}

// Unsupported reports whether the host's libvirt does not support what was
// asked (an older libvirt, or a driver without the call).
func Unsupported(err error) bool { return virt.Unsupported(err) }

// CheckPrivateKey checks an SSH private key (and its passphrase) as the
// connection will read it; attr names the attribute in the error.
func CheckPrivateKey(attr, text, passphrase string) error {
	_, err := hostconn.ParsePrivateKey(attr, text, passphrase)
	return err
}

// CheckHostKeys checks known_hosts lines as the connection will read them.
func CheckHostKeys(attr, text string) error {
	_, err := hostconn.ParseHostKeys(attr, text)
	return err
}

// CheckTLSMaterial checks a TLS connection's PEM material; prefix starts
// each error's attribute path.
func CheckTLSMaterial(prefix, caCert, clientCert, clientKey string) error {
	return hostconn.ParseTLSMaterial(prefix, caCert, clientCert, clientKey)
}
