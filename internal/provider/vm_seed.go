package provider

import (
	"context"
	"fmt"

	"github.com/kohaku/terraform-provider-kohaku/internal/domain"
	"github.com/kohaku/terraform-provider-kohaku/internal/virt"
)

// maxSeedDownload caps how much of a seed volume is read to learn its MACs.
// Kohaku's seeds are a few hundred KiB; one larger than this is refused rather
// than read.
const maxSeedDownload = 8 << 20

// seedNICMACs returns the MAC addresses the seed's network configuration
// matches, in document order, read from the seed volume itself so that a VM
// needs only the seed's id. Network interfaces without a mac of their own take
// them, so cloud-init's MAC-matched configuration finds its interfaces.
func seedNICMACs(ctx context.Context, c *virt.Client, pool, volume string) ([]string, error) {
	in, err := inspectSeed(ctx, c, pool, volume)
	if err != nil {
		return nil, fmt.Errorf("%w. Set mac on every network_interface to skip reading the seed", err)
	}
	return in.MACs, nil
}

// needsSeedMACs reports whether some NIC has no MAC, i.e. whether reading the
// seed can change anything.
func needsSeedMACs(spec *domain.Spec) bool {
	for _, n := range spec.NICs {
		if n.MAC == "" {
			return true
		}
	}
	return false
}

// applySeedMACs gives NIC i the seed's i-th MAC when the NIC has none.
func applySeedMACs(spec *domain.Spec, macs []string) {
	for i := range spec.NICs {
		if spec.NICs[i].MAC == "" && i < len(macs) {
			spec.NICs[i].MAC = macs[i]
		}
	}
}
