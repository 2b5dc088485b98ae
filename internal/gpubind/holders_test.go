package gpubind

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/holders"
	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// hangingHost is the fake host whose unbind of the audio function never
// returns (a driver waiting for a holder), and whose calls fail once their
// context is done, as the libvirt client's do.
type hangingHost struct{ *fakeHost }

func (h hangingHost) DetachNodeDevice(ctx context.Context, name, driver string) error {
	if name == audio {
		h.ops = append(h.ops, "detach "+name)
		<-ctx.Done()
		return ctx.Err()
	}
	return h.fakeHost.DetachNodeDevice(ctx, name, driver)
}

func (h hangingHost) ReattachNodeDevice(ctx context.Context, name string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return h.fakeHost.ReattachNodeDevice(ctx, name)
}

// A bind whose deadline runs out on a hung unbind still gives back what it
// bound before: the give-back has a deadline of its own.
func TestBindHangGivesBackAfterTheDeadline(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	p := plan(t, h)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := Binder{Host: hangingHost{h}}.Bind(ctx, p.Bind)
	var be *BindError
	if !errors.As(err, &be) || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("error %v, want a *BindError for the deadline", err)
	}
	if time.Since(start) > 10*time.Second {
		t.Fatalf("the bind took %s", time.Since(start))
	}
	if len(be.Left) != 0 || h.driver[gpu] != h.original[gpu] || !strings.Contains(err.Error(), "given back to the host (0000:03:00.0)") {
		t.Fatalf("after the hang: left %v, GPU on %q, error %v", be.Left, h.driver[gpu], err)
	}
}

// holderSource is a host's open files and NVIDIA information files.
type holderSource struct {
	opens []holders.Open
	files map[string][]byte
	err   error
}

func (s holderSource) OpenFiles(context.Context) ([]holders.Open, error) { return s.opens, s.err }
func (s holderSource) ReadHostFiles(_ context.Context, paths []string, _ int64) (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, p := range paths {
		if b, ok := s.files[p]; ok {
			out[p] = b
		}
	}
	return out, nil
}

func TestCheckHolders(t *testing.T) {
	t.Parallel()
	h := newFakeHost(t)
	h.driver[gpu], h.original[gpu] = "nvidia", "nvidia" // as the nested host's stand-in has it
	p := plan(t, h)                                     // the VGA on nvidia and its audio on snd_hda_intel
	src := holderSource{
		opens: []holders.Open{
			{PID: 700, Comm: "pulseaudio", Target: "/sys/devices/pci0000:00/0000:00:02.0/0000:03:00.1/config"},
			{PID: 900, Comm: "python3", Target: "/dev/nvidia0"},
			{PID: 901, Comm: "python3", Target: "/dev/nvidia1"},
		},
		files: map[string][]byte{"/proc/driver/nvidia/gpus/0000:03:00.0/information": []byte("Device Minor:\t 1\n")},
	}
	err := CheckHolders(context.Background(), src, p.Bind)
	var he *HoldersError
	if !errors.As(err, &he) {
		t.Fatalf("error %v, want a *HoldersError", err)
	}
	// The GPU is minor 1: the process on /dev/nvidia0 uses another GPU.
	got := ""
	for _, x := range he.Holders {
		got += x.Function.String() + "=" + x.Comm + " "
	}
	if got != "0000:03:00.0=python3 0000:03:00.1=pulseaudio " || he.Holders[0].PID != 901 {
		t.Fatalf("holders %+v", he.Holders)
	}
	// Nothing open: nothing refused; functions already on vfio-pci are not looked at.
	if err := CheckHolders(context.Background(), holderSource{}, p.Bind); err != nil {
		t.Fatal(err)
	}
	for i := range p.Bind {
		p.Bind[i].AlreadyBound = true
	}
	if err := CheckHolders(context.Background(), src, p.Bind); err != nil {
		t.Fatalf("all bound already: %v", err)
	}
	// A failure to look is returned as such.
	p = plan(t, h)
	if err := CheckHolders(context.Background(), holderSource{err: errors.New("ssh down")}, p.Bind); err == nil || errors.As(err, &he) {
		t.Fatalf("failed scan: %v", err)
	}
}

// outlastingHost is the fake host whose detach of the GPU hangs past the
// deadline, as a driver's unbind does while a process holds the card, and
// goes on in the host's kernel afterwards: for the first reads the function
// has no driver (mid-unbind), then libvirt has put it on vfio-pci, unless
// the holder never lets go.
type outlastingHost struct {
	*fakeHost
	reads, release int // release: reads after which the unbind ends; 0, never
}

func (h *outlastingHost) DetachNodeDevice(ctx context.Context, name, driver string) error {
	if name == gpu {
		h.ops = append(h.ops, "detach "+name)
		h.driver[name] = ""
		<-ctx.Done()
		return ctx.Err()
	}
	return h.fakeHost.DetachNodeDevice(ctx, name, driver)
}

func (h *outlastingHost) NodeDeviceXML(ctx context.Context, name string) (string, error) {
	if name == gpu && h.driver[name] == "" {
		if h.reads++; h.release > 0 && h.reads >= h.release {
			h.driver[name] = "vfio-pci"
		}
	}
	return h.fakeHost.NodeDeviceXML(ctx, name)
}

// A bind whose deadline runs out while the GPU's unbind hangs follows the
// function after the deadline: when the unbind ends and libvirt lands it on
// vfio-pci, it is given back to its driver, and the error says so. If the
// unbind has not ended when the give-back's own bound runs out, the function
// is returned as left, for the binding to record.
func TestBindUnbindOutlastingTheDeadline(t *testing.T) {
	t.Parallel()
	for _, release := range []int{3, 0} {
		t.Run(fmt.Sprintf("release after %d reads", release), func(t *testing.T) {
			t.Parallel()
			h := &outlastingHost{fakeHost: newFakeHost(t), release: release}
			h.driver[gpu], h.original[gpu] = "nvidia", "nvidia"
			p := plan(t, h.fakeHost)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
			defer cancel()
			b := Binder{Host: h, SettlePoll: time.Millisecond, GiveBackTimeout: 200 * time.Millisecond}
			_, err := b.Bind(ctx, p.Bind)
			var be *BindError
			if !errors.As(err, &be) || !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("error %v, want a *BindError for the deadline", err)
			}
			if release > 0 {
				if len(be.Left) != 0 || h.driver[gpu] != "nvidia" || h.driver[audio] != h.original[audio] {
					t.Fatalf("left %v, drivers %s", be.Left, h.drivers())
				}
				for _, want := range []string{"0000:03:00.0's unbind from nvidia went on after the deadline", "given back to nvidia once it ended", "Nothing was changed."} {
					if !strings.Contains(err.Error(), want) {
						t.Errorf("error lacks %q: %v", want, err)
					}
				}
				if got := strings.Join(h.ops, ","); got != "detach "+gpu+",reattach "+gpu {
					t.Errorf("ops %s", got)
				}
				return
			}
			if len(be.Left) != 1 || be.Left[0].Address.String() != "0000:03:00.0" || be.Left[0].Original != "nvidia" {
				t.Fatalf("left %+v, want the GPU with its original driver", be.Left)
			}
			for _, want := range []string{"0000:03:00.0 was not given back within", "its unbind has not ended: something still holds the device", "lands on vfio-pci", "virsh nodedev-reattach " + gpu} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error lacks %q: %v", want, err)
				}
			}
			if strings.Contains(err.Error(), "Nothing was changed") {
				t.Errorf("error says nothing changed with the GPU off its driver: %v", err)
			}
		})
	}
}

// A function that lands on vfio-pci after the deadline and that libvirt
// will not give back is polled, not hammered, and is returned as left.
func TestBindUnbindOutlastingTheDeadlineReattachRefused(t *testing.T) {
	t.Parallel()
	h := &outlastingHost{fakeHost: newFakeHost(t), release: 2}
	h.driver[gpu], h.original[gpu] = "nvidia", "nvidia"
	h.fail["reattach "+gpu] = errors.New("device busy")
	p := plan(t, h.fakeHost)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := Binder{Host: h, SettlePoll: 20 * time.Millisecond, GiveBackTimeout: 300 * time.Millisecond}.Bind(ctx, p.Bind)
	var be *BindError
	if !errors.As(err, &be) || len(be.Left) != 1 || h.driver[gpu] != "vfio-pci" {
		t.Fatalf("error %v, left %v, GPU on %q", err, be, h.driver[gpu])
	}
	if !strings.Contains(err.Error(), "it landed on vfio-pci and giving it back failed: device busy") {
		t.Errorf("error %v", err)
	}
	if n := strings.Count(strings.Join(h.ops, ","), "reattach"); n < 2 || n > 20 {
		t.Errorf("%d reattach attempts in 300 ms at a 20 ms poll", n)
	}
}

// Holding returns the holders rather than refusing, and keeps a device
// minor the caller already knows instead of reading NVIDIA's file.
func TestHolding(t *testing.T) {
	t.Parallel()
	gpu := vfio.Address{Bus: 3}
	src := holderSource{
		opens: []holders.Open{{PID: 900, Comm: "python3", Target: "/dev/nvidia0"}, {PID: 901, Comm: "python3", Target: "/dev/nvidia1"}},
		files: map[string][]byte{holders.NVIDIAInfoPath(gpu): []byte("Device Minor:\t 1\n")},
	}
	hs, err := Holding(context.Background(), src, []holders.Function{{Address: gpu, Driver: "nvidia", NVIDIAMinor: -1}})
	if err != nil || len(hs) != 1 || hs[0].PID != 901 {
		t.Fatalf("minor read from the host: %+v, %v", hs, err)
	}
	hs, err = Holding(context.Background(), src, []holders.Function{{Address: gpu, Driver: "nvidia", NVIDIAMinor: 0}})
	if err != nil || len(hs) != 1 || hs[0].PID != 900 {
		t.Fatalf("minor given: %+v, %v", hs, err)
	}
	if hs, err := Holding(context.Background(), holderSource{err: errors.New("ssh down")}, nil); err != nil || hs != nil {
		t.Fatalf("no functions: %+v, %v (want no look at all)", hs, err)
	}
}
