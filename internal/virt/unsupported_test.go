package virt

import (
	"errors"
	"fmt"
	"testing"

	"github.com/digitalocean/go-libvirt"
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
