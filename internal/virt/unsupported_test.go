package virt

import (
	"errors"
	"fmt"
	"testing"

	"github.com/digitalocean/go-libvirt"

	"github.com/kohaku/terraform-provider-kohaku/internal/hostapi"
)

// A driver's "not supported" answers, wrapped as calls wrap them, are told
// apart from real failures, which still fail a read.
func TestUnsupported(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{fmt.Errorf("read free memory: %w", libvirt.Error{Code: uint32(libvirt.ErrNoSupport), Message: "this function is not supported by the connection driver"}), true},
		{fmt.Errorf("list node devices: %w", libvirt.Error{Code: uint32(libvirt.ErrOperationUnsupported)}), true},
		{fmt.Errorf("read free memory: %w", libvirt.Error{Code: uint32(libvirt.ErrInvalidArg)}), false},
		{errors.New("connection lost"), false},
		{nil, false},
	} {
		if got := Unsupported(tc.err); got != tc.want {
			t.Errorf("Unsupported(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// A call libvirt refused as unsupported matches hostapi.ErrUnsupported,
// however it is wrapped; other failures do not.
func TestCallErrorUnsupported(t *testing.T) {
	t.Parallel()
	refused := &CallError{Op: "list node devices", Err: libvirt.Error{Code: uint32(libvirt.ErrNoSupport)}}
	if !hostapi.Unsupported(fmt.Errorf("reading: %w", refused)) {
		t.Error("an unsupported call does not match hostapi.ErrUnsupported")
	}
	failed := &CallError{Op: "list node devices", Err: libvirt.Error{Code: uint32(libvirt.ErrInternalError)}}
	if hostapi.Unsupported(failed) || hostapi.Unsupported(errors.New("x")) {
		t.Error("a failed call matches hostapi.ErrUnsupported")
	}
}
