package hosts

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	"github.com/kohaku/terraform-provider-kohaku/internal/backup"
	"github.com/kohaku/terraform-provider-kohaku/internal/capacity"
	"github.com/kohaku/terraform-provider-kohaku/internal/capture"
	"github.com/kohaku/terraform-provider-kohaku/internal/gpubind"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostconn"
	"github.com/kohaku/terraform-provider-kohaku/internal/imagelife"
	"github.com/kohaku/terraform-provider-kohaku/internal/mdev"
	"github.com/kohaku/terraform-provider-kohaku/internal/netpool"
	"github.com/kohaku/terraform-provider-kohaku/internal/ready"
	"github.com/kohaku/terraform-provider-kohaku/internal/seedlife"
	"github.com/kohaku/terraform-provider-kohaku/internal/snapshot"
	"github.com/kohaku/terraform-provider-kohaku/internal/sriov"
	"github.com/kohaku/terraform-provider-kohaku/internal/vmlife"
)

// Settings is the connection settings of one host, as the provider's
// configuration gives them: internal/hostconn's type, which the connection
// reads as it is. SSHSettings and TLSSettings are its transports' parts.
type Settings = hostconn.Settings

// SSHSettings is the SSH part of a host's Settings.
type SSHSettings = hostconn.SSHSettings

// TLSSettings is the TLS part of a host's Settings.
type TLSSettings = hostconn.TLSSettings

// What a host operation reads and takes. The lifecycle packages' host
// interfaces speak these types; the provider converts them to its models.
type (
	// DomainRef names a domain by UUID and name.
	DomainRef = hostapi.DomainRef
	// DomainStatus is a domain as read: its XML and its state.
	DomainStatus = hostapi.DomainStatus
	// DomainSummary is a domain as listed.
	DomainSummary = hostapi.DomainSummary
	// VolumeHead is a volume as listed.
	VolumeHead = hostapi.VolumeHead
	// VolumeDetail is a volume as read.
	VolumeDetail = hostapi.VolumeDetail
	// ImageUpload is an image to stream into a pool.
	ImageUpload = hostapi.ImageUpload
	// NUMANode is one of the host's NUMA nodes.
	NUMANode = hostapi.NUMANode
)

// The values of an SSH connection's known_hosts policy.
const (
	HostKeyNormal = hostconn.HostKeyNormal
	HostKeyAuto   = hostconn.HostKeyAuto
	HostKeyIgnore = hostconn.HostKeyIgnore
)

// Errors a host operation can be matched against with errors.Is.
var (
	ErrNotFound             = hostapi.ErrNotFound
	ErrDomainNotFound       = hostapi.ErrDomainNotFound
	ErrHostFilesUnsupported = hostapi.ErrHostFilesUnsupported
)

// Conn is one host's connection: the Host the provider works on, and
// Close, which drops the connection.
type Conn interface {
	Host
	Close() error
}

// Connect makes one host's connection from its settings, validating them
// without dialing. main hands the provider internal/virt's
// (internal/hosts/libvirthost.Connect).
type Connect func(Settings) (Conn, error)

// Fleet holds the default host and the named hosts of the provider's hosts
// map. A host is dialed on first use, so one that is down fails only the
// resources placed on it.
type Fleet struct {
	def   Conn
	hosts map[string]Conn
}

// NewFleet validates every host's settings without dialing any of them.
func NewFleet(connect Connect, def Settings, named map[string]Settings) (*Fleet, error) {
	f := &Fleet{hosts: map[string]Conn{}}
	var err error
	if f.def, err = connect(def); err != nil {
		return nil, err
	}
	for name, s := range named {
		if f.hosts[name], err = connect(s); err != nil {
			return nil, fmt.Errorf("hosts[%q]: %w", name, err)
		}
	}
	return f, nil
}

// Host returns a key of the hosts map; "" is the default host.
func (f *Fleet) Host(name string) (Host, error) {
	if name == "" {
		return f.def, nil
	}
	if c, ok := f.hosts[name]; ok {
		return c, nil
	}
	if len(f.hosts) == 0 {
		return nil, fmt.Errorf("host %q is not configured: the provider has no hosts map; add hosts = { %s = { "+
			"uri = \"qemu+ssh://root@...\" } } to the provider block, or leave host empty for the default "+
			"connection", name, name)
	}
	return nil, fmt.Errorf("host %q is not a key of the provider's hosts map; the keys are %s", name, strings.Join(f.Names(), ", "))
}

// Default is the host a resource without a host argument works on.
func (f *Fleet) Default() Host { return f.def }

// Names lists the keys of the hosts map, sorted.
func (f *Fleet) Names() []string {
	names := make([]string, 0, len(f.hosts))
	for n := range f.hosts {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// Close drops every connection the fleet has dialed.
func (f *Fleet) Close() {
	f.def.Close()
	for _, c := range f.hosts {
		c.Close()
	}
}

// Host is one libvirt host as the provider sees it: what the lifecycle
// and reading packages below declare they need of a host, and the few
// listings the provider's list resources and data sources read. Nothing
// else of the connection is in reach of the Terraform layer: a method
// added here is a decision, not an accident. *virt.Client is one
// (internal/hosts/libvirthost).
type Host interface {
	vmlife.Host
	vmlife.MoveHost
	vmlife.PowerHost
	vmlife.GuestAgent
	gpubind.Machine
	gpubind.ResetHost
	gpubind.HealthRunner
	mdev.Host
	sriov.Host
	seedlife.Host
	imagelife.Host
	imagelife.CopySource
	imagelife.CopyTarget
	capture.Host
	snapshot.Host
	backup.Source
	backup.Target
	ready.Agent
	capacity.Conn
	netpool.PoolHost
	netpool.NetworkHost
	netpool.PoolLister
	netpool.NetworkLister

	// Listings for the list resources and the host data source.
	HostInfo(ctx context.Context) (*hostapi.HostInfo, error)
	ListDomains(ctx context.Context) ([]hostapi.DomainSummary, error)
	ActivePoolNames(ctx context.Context) ([]string, error)
	VolumeHeads(ctx context.Context, pool, prefix string, n int64) ([]hostapi.VolumeHead, error)
	VolumeExists(ctx context.Context, pool, name string) (bool, error)
	WritableDisks(ctx context.Context) ([]hostapi.DiskUse, error)
}

// Local reports whether h is reached over libvirt's local socket.
func Local(h Host) bool { return h.Endpoint().Transport == hostconn.TransportUnix }

// Unreachable reports, for an error from a host operation, the redacted
// address of the host that could not be reached; ok is false when the error
// is not about reaching the host.
func Unreachable(err error) (host string, ok bool) {
	var conn *hostconn.ConnectionError
	if errors.As(err, &conn) {
		return conn.Endpoint.Redacted(), true
	}
	return "", false
}

// Unsupported reports whether the host's libvirt does not support what was
// asked (an older libvirt, or a driver without the call).
func Unsupported(err error) bool { return hostapi.Unsupported(err) }

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
