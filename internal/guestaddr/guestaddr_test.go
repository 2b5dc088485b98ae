package guestaddr

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestAddresses(t *testing.T) {
	t.Parallel()
	got := Addresses([]Interface{
		{Name: "lo", MAC: "00:00:00:00:00:00", IPs: []IP{{"127.0.0.1", 8}, {"::1", 128}}},
		{Name: "enp1s0", MAC: "52:54:00:AB:CD:EF", IPs: []IP{
			{"10.0.2.15", 24},
			{"fe80::5054:ff:feab:cdef%enp1s0", 64},
			{"2001:DB8::0:1", 64},
			{"not an address", 24},
			{"10.0.2.16", 33}, // a prefix IPv4 cannot have
		}},
		{Name: "docker0", MAC: "02:42:ac:11:00:01"}, // no address
		{Name: "wg0", IPs: []IP{{"10.9.0.1", 32}, {"127.0.0.2", 8}}},
	})
	want := []Address{
		{Interface: "enp1s0", MAC: "52:54:00:ab:cd:ef", Address: "10.0.2.15/24"},
		{Interface: "enp1s0", MAC: "52:54:00:ab:cd:ef", Address: "fe80::5054:ff:feab:cdef/64"},
		{Interface: "enp1s0", MAC: "52:54:00:ab:cd:ef", Address: "2001:db8::1/64"},
		{Interface: "wg0", Address: "10.9.0.1/32"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Addresses:\n got %+v\nwant %+v", got, want)
	}
	if got := Addresses(nil); got == nil || len(got) != 0 {
		t.Errorf("Addresses(nil) = %#v, want an empty list (a guest with no address is not unknown)", got)
	}
}

func TestReadAnswers(t *testing.T) {
	t.Parallel()
	addrs, ok := Read(context.Background(), time.Second, func(ctx context.Context) ([]Interface, error) {
		if _, has := ctx.Deadline(); !has {
			t.Error("the agent is asked without a deadline")
		}
		return []Interface{{Name: "eth0", MAC: "52:54:00:00:00:01", IPs: []IP{{"192.168.1.9", 24}}}}, nil
	})
	if !ok || len(addrs) != 1 || addrs[0].Address != "192.168.1.9/24" {
		t.Errorf("Read = %+v, %v", addrs, ok)
	}
}

func TestReadAgentError(t *testing.T) {
	t.Parallel()
	addrs, ok := Read(context.Background(), time.Second, func(context.Context) ([]Interface, error) {
		return nil, errors.New("QEMU guest agent is not connected")
	})
	if ok || addrs != nil {
		t.Errorf("Read = %+v, %v; want nothing, not ok", addrs, ok)
	}
}

// An agent that never answers costs the bound, not more: the ask is
// abandoned, so a caller that ignores its context does not hold Read.
func TestReadHungAgentCostsTheBound(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	defer close(release)
	start := time.Now()
	addrs, ok := Read(context.Background(), 150*time.Millisecond, func(context.Context) ([]Interface, error) {
		<-release // ignores ctx, as a call already on the wire does
		return nil, nil
	})
	took := time.Since(start)
	if ok || addrs != nil {
		t.Errorf("Read = %+v, %v; want nothing, not ok", addrs, ok)
	}
	if took < 150*time.Millisecond || took > 2*time.Second {
		t.Errorf("Read of a hung agent took %s, want the bound (150ms)", took)
	}
}

func TestReadCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, ok := Read(ctx, time.Hour, func(ctx context.Context) ([]Interface, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	})
	if ok {
		t.Error("Read of a cancelled refresh says the agent answered")
	}
}
