package virt

import (
	"context"

	"github.com/digitalocean/go-libvirt"
)

// AskShutdown asks the guest once to power off, through via. It returns
// when the request is delivered, not when the guest is off.
func (c *Client) AskShutdown(ctx context.Context, ref DomainRef, via PowerVia) error {
	dom, err := domainHandle(ref)
	if err != nil {
		return err
	}
	flags := libvirt.DomainShutdownAcpiPowerBtn
	if via == ViaGuestAgent {
		flags = libvirt.DomainShutdownGuestAgent
	}
	return c.Call(ctx, "ask domain "+ref.String()+" to shut down through the "+string(via), func(l *libvirt.Libvirt) error {
		return l.DomainShutdownFlags(dom, flags)
	})
}

// AskReboot asks the guest once to reboot, through via. Through ACPI,
// libvirt presses the power button and starts the guest again once it
// has powered off.
func (c *Client) AskReboot(ctx context.Context, ref DomainRef, via PowerVia) error {
	dom, err := domainHandle(ref)
	if err != nil {
		return err
	}
	flags := libvirt.DomainRebootAcpiPowerBtn
	if via == ViaGuestAgent {
		flags = libvirt.DomainRebootGuestAgent
	}
	return c.Call(ctx, "ask domain "+ref.String()+" to reboot through the "+string(via), func(l *libvirt.Libvirt) error {
		return l.DomainReboot(dom, flags)
	})
}

// ResetDomain resets the domain like a reset button: the guest restarts at
// once, without shutting down, in the same QEMU process.
func (c *Client) ResetDomain(ctx context.Context, ref DomainRef) error {
	dom, err := domainHandle(ref)
	if err != nil {
		return err
	}
	return c.Call(ctx, "reset domain "+ref.String(), func(l *libvirt.Libvirt) error {
		return l.DomainReset(dom, 0)
	})
}

// ForceOffDomain stops the domain at once, like pulling the plug. A domain
// already off is not an error.
func (c *Client) ForceOffDomain(ctx context.Context, ref DomainRef) error {
	dom, err := domainHandle(ref)
	if err != nil {
		return err
	}
	return c.Call(ctx, "force off domain "+ref.String(), func(l *libvirt.Libvirt) error {
		err := l.DomainDestroy(dom)
		if libvirtCode(err, libvirt.ErrOperationInvalid) {
			return nil
		}
		return err
	})
}
