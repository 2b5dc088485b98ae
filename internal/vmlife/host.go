package vmlife

import (
	"context"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostconn"
)

// Host is what a VM's life needs from a libvirt host. *virt.Client is one.
type Host interface {
	Endpoint() hostconn.Endpoint

	LookupDomain(ctx context.Context, nameOrUUID string) (hostapi.DomainRef, error)
	ReadDomain(ctx context.Context, ref hostapi.DomainRef) (*hostapi.DomainStatus, error)
	DefineDomain(ctx context.Context, name, xml string) (hostapi.DomainRef, error)
	StartDomain(ctx context.Context, ref hostapi.DomainRef) error
	SetAutostart(ctx context.Context, ref hostapi.DomainRef, on bool) error
	StopDomain(ctx context.Context, ref hostapi.DomainRef, grace time.Duration) (hostapi.StopResult, error)
	UndefineDomain(ctx context.Context, ref hostapi.DomainRef) error

	VolumeInfo(ctx context.Context, pool, name string) (*hostapi.VolumeDetail, error)
	VolumeByPath(ctx context.Context, path string) (pool, name string, err error)
	CreateOverlay(ctx context.Context, pool, name, basePool, baseName string, capacity int64) (*hostapi.VolumeDetail, error)
	RemoveVolume(ctx context.Context, pool, name string) error
	GrowVolume(ctx context.Context, pool, name string, capacity int64) error
	GrowDiskLive(ctx context.Context, ref hostapi.DomainRef, target string, size int64) error
	CreateVolume(ctx context.Context, pool, name, format string, capacity int64) (*hostapi.VolumeDetail, error)
	FlattenVolume(ctx context.Context, srcPool, srcName, pool, name string) (*hostapi.VolumeDetail, error)
	AttachDisk(ctx context.Context, ref hostapi.DomainRef, diskXML string) error
	DetachDisk(ctx context.Context, ref hostapi.DomainRef, diskXML string) error
	DownloadVolume(ctx context.Context, pool, name string, limit int64) ([]byte, error)

	NodeDeviceXML(ctx context.Context, name string) (string, error)
	NUMANodes(ctx context.Context) ([]hostapi.NUMANode, error)
}

// StepError is a step of a VM's life that failed.
type StepError struct {
	Step string // what was being done, e.g. "define the domain"
	Err  error
}

func (e *StepError) Error() string { return e.Step + ": " + e.Err.Error() }
func (e *StepError) Unwrap() error { return e.Err }

func stepErr(step string, err error) *StepError { return &StepError{Step: step, Err: err} }
