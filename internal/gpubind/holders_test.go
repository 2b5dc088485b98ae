package gpubind

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kohaku/terraform-provider-kohaku/internal/holders"
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
