package virt

import (
	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
	"github.com/kohaku/terraform-provider-kohaku/internal/hostconn"
)

// What a connection is made of and how it fails, from internal/hostconn:
// the provider checks its settings and the lifecycle packages match these
// errors without importing this package.
type (
	// Settings is hostconn.Settings.
	Settings = hostconn.Settings
	// SSHSettings is hostconn.SSHSettings.
	SSHSettings = hostconn.SSHSettings
	// TLSSettings is hostconn.TLSSettings.
	TLSSettings = hostconn.TLSSettings
	// Endpoint is hostconn.Endpoint.
	Endpoint = hostconn.Endpoint
	// ConnectionError is hostconn.ConnectionError.
	ConnectionError = hostconn.ConnectionError
	// UnknownHostKeyError is hostconn.UnknownHostKeyError.
	UnknownHostKeyError = hostconn.UnknownHostKeyError
	// HostKeyMismatchError is hostconn.HostKeyMismatchError.
	HostKeyMismatchError = hostconn.HostKeyMismatchError
	// AuthError is hostconn.AuthError.
	AuthError = hostconn.AuthError
	// TLSError is hostconn.TLSError.
	TLSError = hostconn.TLSError
)

// Host key policies and the transports a libvirt URI can name.
const (
	HostKeyNormal = hostconn.HostKeyNormal
	HostKeyAuto   = hostconn.HostKeyAuto
	HostKeyIgnore = hostconn.HostKeyIgnore

	TransportUnix = hostconn.TransportUnix
	TransportTCP  = hostconn.TransportTCP
	TransportTLS  = hostconn.TransportTLS
	TransportSSH  = hostconn.TransportSSH
)

// What the host operations read and take, from internal/hostapi: the
// lifecycle packages' host interfaces speak these types, which Client's
// methods implement.
type (
	// DomainRef is hostapi.DomainRef.
	DomainRef = hostapi.DomainRef
	// DomainState is hostapi.DomainState.
	DomainState = hostapi.DomainState
	// DomainStatus is hostapi.DomainStatus.
	DomainStatus = hostapi.DomainStatus
	// DomainSummary is hostapi.DomainSummary.
	DomainSummary = hostapi.DomainSummary
	// StopResult is hostapi.StopResult.
	StopResult = hostapi.StopResult
	// PowerVia is hostapi.PowerVia.
	PowerVia = hostapi.PowerVia
	// VolumeDetail is hostapi.VolumeDetail.
	VolumeDetail = hostapi.VolumeDetail
	// VolumeHead is hostapi.VolumeHead.
	VolumeHead = hostapi.VolumeHead
	// DiskUse is hostapi.DiskUse.
	DiskUse = hostapi.DiskUse
	// OverlayExistsError is hostapi.OverlayExistsError.
	OverlayExistsError = hostapi.OverlayExistsError
	// ImageUpload is hostapi.ImageUpload.
	ImageUpload = hostapi.ImageUpload
	// ImageDigest is hostapi.ImageDigest.
	ImageDigest = hostapi.ImageDigest
	// HostInfo is hostapi.HostInfo.
	HostInfo = hostapi.HostInfo
	// PoolInfo is hostapi.PoolInfo.
	PoolInfo = hostapi.PoolInfo
	// NetworkInfo is hostapi.NetworkInfo.
	NetworkInfo = hostapi.NetworkInfo
	// NUMANode is hostapi.NUMANode.
	NUMANode = hostapi.NUMANode
	// HugePages is hostapi.HugePages.
	HugePages = hostapi.HugePages
	// NodeDeviceState is hostapi.NodeDeviceState.
	NodeDeviceState = hostapi.NodeDeviceState
	// Definition is hostapi.Definition.
	Definition = hostapi.Definition
	// AgentExecResult is hostapi.AgentExecResult.
	AgentExecResult = hostapi.AgentExecResult
)

// How a domain stopped, and how a guest is asked to power off.
const (
	StopNotRunning  = hostapi.StopNotRunning
	StopGraceful    = hostapi.StopGraceful
	StopForced      = hostapi.StopForced
	StopForceMargin = hostapi.StopForceMargin
	ViaGuestAgent   = hostapi.ViaGuestAgent
	ViaACPI         = hostapi.ViaACPI
)

// Sentinel errors of the host operations; errors that wrap them also say
// which object and what to do.
var (
	ErrNotFound             = hostapi.ErrNotFound
	ErrDomainNotFound       = hostapi.ErrDomainNotFound
	ErrPoolNotFound         = hostapi.ErrPoolNotFound
	ErrVolumeNotFound       = hostapi.ErrVolumeNotFound
	ErrAgentUnavailable     = hostapi.ErrAgentUnavailable
	ErrHostFilesUnsupported = hostapi.ErrHostFilesUnsupported
	ErrResetUnusable        = hostapi.ErrResetUnusable
)
