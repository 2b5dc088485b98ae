package holders

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/kohaku/terraform-provider-kohaku/internal/vfio"
)

// Open is one file a process has open (or, with an empty Target, a process
// that matters by its name alone: nvidia-persistenced).
type Open struct {
	PID    int
	Comm   string
	Target string
	// Device is, for a DRM node (/dev/dri/cardN, /dev/dri/renderDN), the
	// sysfs path of the PCI function behind it; empty otherwise.
	Device string
}

// persistenced is nvidia-persistenced's name as /proc/PID/comm has it,
// cut to 15 characters by the kernel.
const persistenced = "nvidia-persiste"

// interesting reports whether an open file's target can hold a PCI
// function: an NVIDIA device node, a DRM node (a display server or a
// compute job on the card's /dev/dri/cardN or renderDN, whichever driver
// made it) or a file under /sys/devices.
func interesting(target string) bool {
	return strings.HasPrefix(target, "/dev/nvidia") || strings.HasPrefix(target, drmPrefix) || strings.HasPrefix(target, "/sys/devices/")
}

const drmPrefix = "/dev/dri/"

// Script is the shell script that lists, on a remote host, what ScanProc
// lists locally: one "PID<TAB>COMM<TAB>TARGET<TAB>DEVICE" line per
// interesting open file (GNU find matches the fd links; DEVICE is the PCI
// function's sysfs path behind a DRM node, read from /sys/class/drm), and
// one with an empty target per nvidia-persistenced process. It reads /proc
// and /sys only, changes nothing and always exits 0; run as a user other
// than root it sees only that user's processes' files.
const Script = `exec 2>/dev/null
find /proc/[0-9]*/fd -mindepth 1 -maxdepth 1 -type l \( -lname '/dev/nvidia*' -o -lname '/dev/dri/*' -o -lname '/sys/devices/*' \) -printf '%h\t%l\n' |
while IFS='	' read -r d l; do p=${d#/proc/}; p=${p%/fd}; c=$(cat /proc/$p/comm); v=
  case $l in /dev/dri/*) v=$(readlink -f "/sys/class/drm/${l##*/}/device");; esac
  printf '%s\t%s\t%s\t%s\n' "$p" "$c" "$l" "$v"; done
for f in /proc/[0-9]*/comm; do
  read -r n < "$f" || continue
  if [ "$n" = ` + persistenced + ` ]; then p=${f#/proc/}; printf '%s\t%s\t\n' "${p%/comm}" "$n"; fi
done
exit 0
`

// ParseScript reads Script's output.
func ParseScript(out []byte) []Open {
	var opens []Open
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.SplitN(sc.Text(), "\t", 4)
		if len(f) < 3 {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		if f[2] != "" && !interesting(f[2]) {
			continue
		}
		o := Open{PID: pid, Comm: f[1], Target: f[2]}
		if len(f) == 4 && strings.HasPrefix(o.Target, drmPrefix) {
			o.Device = f[3]
		}
		opens = append(opens, o)
	}
	return opens
}

// ScanProc lists the interesting open files of every process under a /proc
// tree (root is "/proc" on a real host), and each nvidia-persistenced
// process; a DRM node's PCI function is read under the sysfs tree sys
// ("/sys"). Processes and files that vanish or cannot be read while it
// looks are skipped.
func ScanProc(root, sys string) ([]Open, error) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return nil, err
	}
	var opens []Open
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || !e.IsDir() {
			continue
		}
		dir := filepath.Join(root, e.Name())
		comm := ""
		if b, err := os.ReadFile(filepath.Join(dir, "comm")); err == nil {
			comm = strings.TrimSpace(string(b))
		}
		fds, _ := os.ReadDir(filepath.Join(dir, "fd"))
		for _, fd := range fds {
			target, err := os.Readlink(filepath.Join(dir, "fd", fd.Name()))
			if err == nil && interesting(target) {
				o := Open{PID: pid, Comm: comm, Target: target}
				if strings.HasPrefix(target, drmPrefix) {
					o.Device = drmDevice(sys, target)
				}
				opens = append(opens, o)
			}
		}
		if comm == persistenced {
			opens = append(opens, Open{PID: pid, Comm: comm})
		}
	}
	return opens, nil
}

// drmDevice is the sysfs path ("/sys/devices/...") of the device behind a
// DRM node, read from sys's class/drm; "" when it cannot be read.
func drmDevice(sys, node string) string {
	p, err := filepath.EvalSymlinks(filepath.Join(sys, "class", "drm", filepath.Base(node), "device"))
	if err != nil {
		return ""
	}
	rel, err := filepath.Rel(sys, p)
	if err != nil || strings.HasPrefix(rel, "..") {
		return ""
	}
	return "/sys/" + filepath.ToSlash(rel)
}

// Function is a PCI function about to be unbound.
type Function struct {
	Address vfio.Address
	// Driver is the host driver it is on now.
	Driver string
	// NVIDIAMinor is N of the /dev/nvidiaN that NVIDIA's driver made for
	// it, or -1 when unknown (then any /dev/nvidiaN may be it).
	NVIDIAMinor int
}

// Holder is a process that holds a function.
type Holder struct {
	Function vfio.Address
	PID      int
	Comm     string
	// File is what it has open; empty for nvidia-persistenced known by
	// name alone.
	File string
}

var nvidiaNode = regexp.MustCompile(`^/dev/nvidia([0-9]+)$`)

// Find returns the processes among opens that hold the functions, sorted by
// function, then PID.
func Find(opens []Open, fns []Function) []Holder {
	var out []Holder
	seen := map[Holder]bool{}
	add := func(h Holder) {
		if !seen[h] {
			seen[h] = true
			out = append(out, h)
		}
	}
	for _, fn := range fns {
		sysfs := "/" + fn.Address.String() + "/"
		for _, o := range opens {
			switch {
			case o.Target == "":
				if o.Comm == persistenced && fn.Driver == vfio.DriverNVIDIA {
					add(Holder{Function: fn.Address, PID: o.PID, Comm: o.Comm})
				}
			case strings.HasPrefix(o.Target, "/sys/devices/") && (strings.Contains(o.Target, sysfs) || strings.HasSuffix(o.Target, sysfs[:len(sysfs)-1])):
				add(Holder{Function: fn.Address, PID: o.PID, Comm: o.Comm, File: o.Target})
			case strings.HasPrefix(o.Target, drmPrefix):
				// the node's own device, not one behind a bridge it sits on
				if strings.HasSuffix(o.Device, sysfs[:len(sysfs)-1]) {
					add(Holder{Function: fn.Address, PID: o.PID, Comm: o.Comm, File: o.Target})
				}
			case fn.Driver == vfio.DriverNVIDIA:
				m := nvidiaNode.FindStringSubmatch(o.Target)
				if m != nil && (fn.NVIDIAMinor < 0 || m[1] == strconv.Itoa(fn.NVIDIAMinor)) {
					add(Holder{Function: fn.Address, PID: o.PID, Comm: o.Comm, File: o.Target})
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if c := out[i].Function.Compare(out[j].Function); c != 0 {
			return c < 0
		}
		if out[i].PID != out[j].PID {
			return out[i].PID < out[j].PID
		}
		return out[i].File < out[j].File
	})
	return out
}

// Describe says who holds what and what to do, one holder a line.
func Describe(hs []Holder) string {
	var b strings.Builder
	persist := false
	for _, h := range hs {
		if h.File == "" {
			fmt.Fprintf(&b, "  %s by process %d (%s): nvidia-persistenced keeps NVIDIA's driver on its GPUs\n", h.Function, h.PID, h.Comm)
		} else {
			fmt.Fprintf(&b, "  %s by process %d (%s), which has %s open\n", h.Function, h.PID, h.Comm, h.File)
		}
		persist = persist || h.Comm == persistenced
	}
	b.WriteString("Unbinding a function that a process holds hangs or fails with EBUSY (NVIDIA's driver waits for " +
		"its users to close the device). Stop those processes")
	if persist {
		b.WriteString(" (nvidia-persistenced: `systemctl stop nvidia-persistenced`, or `nvidia-smi -i <address> -pm 0` " +
			"to drop persistence for this GPU alone)")
	}
	b.WriteString(", or find them again with `fuser -v /dev/nvidia* /dev/dri/*` or `lsof /dev/nvidia* /dev/dri/*` on the host, then apply again.")
	return b.String()
}

// NVIDIAInfoPath is where NVIDIA's driver describes a GPU it drives,
// "Device Minor:" among it.
func NVIDIAInfoPath(a vfio.Address) string {
	return "/proc/driver/nvidia/gpus/" + a.String() + "/information"
}

// ParseNVIDIAMinor reads "Device Minor: N" from NVIDIA's information file;
// -1 when it is not there.
func ParseNVIDIAMinor(info []byte) int {
	for _, l := range strings.Split(string(info), "\n") {
		k, v, ok := strings.Cut(l, ":")
		if ok && strings.TrimSpace(k) == "Device Minor" {
			if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
				return n
			}
		}
	}
	return -1
}
