package netpool

import (
	"context"
	"fmt"
	"strings"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
)

// PoolHost is what managing storage pools needs from a libvirt host.
// *virt.Client is one.
type PoolHost interface {
	PoolDefinition(ctx context.Context, name string) (*hostapi.Definition, error)
	DefinePool(ctx context.Context, doc string) error
	BuildPool(ctx context.Context, name string) error
	StartPool(ctx context.Context, name string) error
	SetPoolAutostart(ctx context.Context, name string, on bool) error
	RefreshPool(ctx context.Context, name string) error
	StopPool(ctx context.Context, name string) error
	DeletePoolTarget(ctx context.Context, name string) error
	UndefinePool(ctx context.Context, name string) error
	ListVolumeNames(ctx context.Context, pool string) ([]string, error)
	RemoveVolume(ctx context.Context, pool, name string) error
}

// NetworkHost is what managing networks needs from a libvirt host.
// *virt.Client is one.
type NetworkHost interface {
	NetworkDefinition(ctx context.Context, name string) (*hostapi.Definition, error)
	DefineNetwork(ctx context.Context, doc string) error
	StartNetwork(ctx context.Context, name string) error
	SetNetworkAutostart(ctx context.Context, name string, on bool) error
	StopNetwork(ctx context.Context, name string) error
	UndefineNetwork(ctx context.Context, name string) error
	UpdateNetworkDHCPHost(ctx context.Context, name string, add bool, hostXML string, live bool) error
}

// ExistsError is a create refused because the host already has a pool or
// network of that name, which this resource did not make.
type ExistsError struct{ Kind, Name string }

func (e *ExistsError) Error() string {
	return fmt.Sprintf("the host already has a %s named %q, which this resource did not create; Kohaku does not "+
		"take it over: import it (terraform import) or choose another name", e.Kind, e.Name)
}

// NotEmptyError is a pool destroy refused because the pool still holds
// volumes.
type NotEmptyError struct {
	Pool    string
	Volumes []string
}

func (e *NotEmptyError) Error() string {
	return fmt.Sprintf("storage pool %q still holds %d volume(s): %s. Destroying it would lose them; remove them (or "+
		"the resources that made them) first, or set force_destroy = true to delete them with the pool",
		e.Pool, len(e.Volumes), strings.Join(e.Volumes, ", "))
}
