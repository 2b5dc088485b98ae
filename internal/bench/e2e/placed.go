package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// placedConfig is n CPU-only VMs (defined, not started, no disk) that
// either name the host (placed false: host = "", the provider's default
// connection) or ask placement for one (placed true: placement {}, which
// chooses among the provider's hosts, here the one).
func placedConfig(prefix string, n int, placed bool) string {
	where := `host = ""`
	if placed {
		where = "placement {}"
	}
	return fmt.Sprintf(`terraform {
  required_providers {
    kohaku = { source = "kohaku/kohaku" }
  }
}

variable "uri" {
  type = string
}

provider "kohaku" {
  uri = var.uri
}

resource "kohaku_vm" "v" {
  count      = %[1]d
  name       = "%[2]s${count.index}"
  type       = "qemu"
  vcpu       = 1
  memory_mib = 64
  running    = false
  %[3]s
}
`, n, prefix, where)
}

// placedResult is one N of the placement benchmark.
type placedResult struct {
	N                         int
	NamedWall, PlacedWall     float64
	NamedRPCs, PlacedRPCs     rpcCount
	NamedListed, PlacedListed int64 // node device listings: one per capacity read of the host
}

// listings counts ConnectListAllNodeDevices, which a capacity read of a
// host makes once and creating a CPU-only VM never does.
func listings(c rpcCount) int64 { return c.ByProc[procName(285)] }

// measurePlaced applies n named and n placed VMs through the counting
// proxy, one after the other, and destroys each after.
func (h *harness) measurePlaced(n int) (placedResult, error) {
	r := placedResult{N: n}
	for _, placed := range []bool{false, true} {
		tag := fmt.Sprintf("n%d-named", n)
		if placed {
			tag = fmt.Sprintf("n%d-placed", n)
		}
		dir := filepath.Join(h.work, "p"+tag)
		if err := writeFile(filepath.Join(dir, "main.tf"), placedConfig(h.prefix+tag+"-", n, placed)); err != nil {
			return r, err
		}
		fmt.Fprintf(os.Stderr, "e2e: placement N=%d %s:", n, strings.TrimPrefix(tag, fmt.Sprintf("n%d-", n)))
		h.proxy.reset()
		u, _, err := h.tf(dir, "apply", []string{"-var", "uri=" + h.proxyURI}, false)
		if err != nil {
			return r, err
		}
		c := h.proxy.snapshot()
		fmt.Fprintf(os.Stderr, " apply %.1fs, %d node device listings", u.Wall, listings(c))
		if placed {
			r.PlacedWall, r.PlacedRPCs, r.PlacedListed = u.Wall, c, listings(c)
		} else {
			r.NamedWall, r.NamedRPCs, r.NamedListed = u.Wall, c, listings(c)
		}
		if _, _, err := h.tf(dir, "destroy", []string{"-var", "uri=" + h.proxyURI}, false); err != nil {
			return r, err
		}
		fmt.Fprintln(os.Stderr, "; destroyed")
	}
	return r, nil
}

// placedReport is the placement benchmark's table.
func placedReport(rs []placedResult, parallelism int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "## Placement: N VMs placed in one apply\n\n")
	fmt.Fprintf(&b, "`terraform apply` (-parallelism=%d) of N CPU-only VMs (defined, not started) that ask placement for a host, "+
		"against the same N naming their host, in the same run, through a counting proxy in front of libvirtd. "+
		"A capacity read of a host lists its node devices once; creating a CPU-only VM never does, so the listings "+
		"count the capacity reads (the plan's and the apply's provider processes each read the host once).\n\n", parallelism)
	b.WriteString("| N | named apply (s) | placed apply (s) | placed / named | capacity reads, named | capacity reads, placed | placed reads per VM | libvirt calls per VM, named | per VM, placed |\n")
	b.WriteString("|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range rs {
		total := func(c rpcCount) int64 {
			var t int64
			for _, v := range c.ByProc {
				t += v
			}
			return t
		}
		fmt.Fprintf(&b, "| %d | %.1f | %.1f | %.2f | %d | %d | %.3f | %.1f | %.1f |\n", r.N, r.NamedWall, r.PlacedWall, r.PlacedWall/r.NamedWall,
			r.NamedListed, r.PlacedListed, float64(r.PlacedListed)/float64(r.N),
			float64(total(r.NamedRPCs))/float64(r.N), float64(total(r.PlacedRPCs))/float64(r.N))
	}
	return b.String()
}
